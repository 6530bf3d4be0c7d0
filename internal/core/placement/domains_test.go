package placement

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/braidfs/braid/internal/layout"
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
			str := func(key string) string {
				var v string
				if d.HasArg(key) {
					d.ScanArgs(t, key, &v)
				}
				return v
			}
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
