package placement

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestTranscripts places files on clusters with hosts and racks:
//
//	cluster osds=ID@HOST/RACK,...       (ID alone: no host or rack named)
//	place spec=S [hint=N] [seed=N]       a new file: its groups, by host and rack
//	replace spec=S osds=1,2,... move=C,... [seed=N]
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var up []Candidate
		byID := map[uint32]Candidate{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			str := func(key string) string { return transcript.Str(t, d, key) }
			seed := uint64(1)
			if s := str("seed"); s != "" {
				seed, _ = strconv.ParseUint(s, 10, 64)
			}
			rng := rand.New(rand.NewPCG(seed, 2))
			where := func(ids []uint32) string {
				var out []string
				for _, id := range ids {
					c := byID[id]
					out = append(out, fmt.Sprintf("%d@%s/%s", id, c.Host, c.Rack))
				}
				return strings.Join(out, " ")
			}
			switch d.Cmd {
			case "cluster":
				up, byID = nil, map[uint32]Candidate{}
				for _, f := range strings.Split(str("osds"), ",") {
					idText, dom, _ := strings.Cut(f, "@")
					host, rack, _ := strings.Cut(dom, "/")
					id, _ := strconv.Atoi(idText)
					c := Candidate{ID: uint32(id), FreeBytes: 1 << 30, Host: host, Rack: rack}
					up = append(up, c)
					byID[c.ID] = c
				}
				return fmt.Sprintf("%d OSDs", len(up))
			case "place":
				spec, err := layout.Parse(str("spec"))
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				hint := int64(-1)
				if h := str("hint"); h != "" {
					hint, _ = strconv.ParseInt(h, 10, 64)
				}
				l, err := Place(spec, hint, up, rng)
				if err != nil {
					return "error: " + err.Error()
				}
				if err := checkPlaced(l, up); err != nil {
					d.Fatalf(t, "invariant: %v", err)
				}
				var out []string
				w := spec.Width()
				for g := range l.Groups {
					out = append(out, fmt.Sprintf("group %d: %s", g, where(l.OSDs[g*w:(g+1)*w])))
				}
				return strings.Join(out, "\n")
			case "replace":
				spec, _ := layout.Parse(str("spec"))
				var osds []uint32
				for _, f := range strings.Split(str("osds"), ",") {
					id, _ := strconv.Atoi(f)
					osds = append(osds, uint32(id))
				}
				var move []int
				for _, f := range strings.Split(str("move"), ",") {
					c, _ := strconv.Atoi(f)
					move = append(move, c)
				}
				var live []Candidate
				for _, c := range up {
					if !strings.Contains(","+str("down")+",", fmt.Sprintf(",%d,", c.ID)) {
						live = append(live, c)
					}
				}
				l := layout.Layout{Spec: spec, Groups: len(osds) / spec.Width(), OSDs: osds, Version: 1}
				out, err := Replace(l, move, live, rng)
				if err != nil {
					return "error: " + err.Error()
				}
				return where(out)
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// TestDomainsHoldOnRandomClusters: on random clusters of hosts and
// racks, every placement keeps components of a group in distinct hosts
// (racks) whenever there are as many as the group is wide.
func TestDomainsHoldOnRandomClusters(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 3))
	specs := []string{"ec:4+2", "ec:8+3", "mirror:3", "ec:2+1"}
	for trial := range 300 {
		racks, hostsPer, osdsPer := 1+rng.IntN(8), 1+rng.IntN(4), 1+rng.IntN(3)
		var up []Candidate
		for r := range racks {
			for h := range hostsPer {
				for range osdsPer {
					up = append(up, Candidate{ID: uint32(len(up) + 1), FreeBytes: int64(1+rng.IntN(100)) << 30,
						Host: fmt.Sprint("h", h), Rack: fmt.Sprint("r", r)})
				}
			}
		}
		spec, _ := layout.Parse(specs[rng.IntN(len(specs))])
		l, err := place(spec, -1, up, rng)
		if err != nil {
			continue // too few OSDs
		}
		if err := checkPlaced(l, up); err != nil {
			t.Fatalf("trial %d (seed %d), %d racks x %d hosts x %d OSDs, %s: %v", trial, seed, racks, hostsPer, osdsPer, spec, err)
		}
	}
}

// TestLargeClustersDrawLikeSmallOnes: from pickScanMax OSDs on,
// placement draws by weighted sampling; it keeps the domain rule, and
// picks OSDs as often as the key-per-OSD path does (a 10x emptier OSD
// about 10x as often).
func TestLargeClustersDrawLikeSmallOnes(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 4))
	mk := func(n int) []Candidate {
		var up []Candidate
		for i := range n {
			free := int64(1 << 30)
			if i == 0 {
				free = 10 << 30
			}
			up = append(up, Candidate{ID: uint32(i + 1), FreeBytes: free, Host: fmt.Sprint("h", i/4), Rack: fmt.Sprint("r", i/40)})
		}
		return up
	}
	spec, _ := layout.Parse("ec:8+3")
	rate := func(up []Candidate) float64 {
		hits, trials := 0, 4000
		for range trials {
			l, err := place(spec, 0, up, rng)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkPlaced(l, up); err != nil {
				t.Fatalf("seed %d, %d OSDs: %v", seed, len(up), err)
			}
			for _, id := range l.OSDs {
				if id == 1 {
					hits++
				}
			}
		}
		// OSD 1's share of picks over a uniform OSD's share.
		return float64(hits) / float64(trials) / (float64(spec.Width()) / float64(len(up)))
	}
	small, large := rate(mk(pickScanMax-12)), rate(mk(pickScanMax+88))
	for _, r := range []float64{small, large} {
		if r < 6 || r > 14 {
			t.Fatalf("seed %d: the 10x emptier OSD picked %.1fx as often as the others (small path %.1f, large %.1f)", seed, r, small, large)
		}
	}
}
