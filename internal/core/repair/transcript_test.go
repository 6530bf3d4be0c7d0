package repair

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives Plan through testdata's transcripts:
//
//	plan spec=S osds=1,2,... [spare=N] [state=ID:down|out,...] [gone=ID,...] [drain=ID,...] [dirty=COMP,...]
//	assignment kind=rebuild|scrub [move=COMP:FROM:TO] (then the same as plan)
//
// Every OSD of the layout is up unless state says otherwise; spare adds
// N more up OSDs (ids after the largest); gone ones are unknown to the
// cluster (removed).
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/plan", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "plan" && d.Cmd != "assignment" {
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			arg := func(key string) string { return transcript.Str(t, d, key) }
			ints := func(key string) []int64 { return transcript.Ints(t, d, key) }
			spec, err := layout.Parse(arg("spec"))
			if err != nil {
				d.Fatalf(t, "spec: %v", err)
			}
			var osds []uint32
			views := map[uint32]cluster.View{}
			top := uint32(0)
			for _, id := range ints("osds") {
				osds = append(osds, uint32(id))
				views[uint32(id)] = cluster.View{State: cluster.StateUp}
				top = max(top, uint32(id))
			}
			spare, _ := strconv.Atoi(arg("spare"))
			for i := range uint32(spare) {
				views[top+1+i] = cluster.View{State: cluster.StateUp}
			}
			for _, f := range strings.Split(arg("state"), ",") {
				if id, st, ok := strings.Cut(f, ":"); ok {
					n, _ := strconv.Atoi(id)
					views[uint32(n)] = cluster.View{State: st}
				}
			}
			for _, id := range ints("drain") {
				v := views[uint32(id)]
				v.Drain = true
				views[uint32(id)] = v
			}
			for _, id := range ints("gone") {
				delete(views, uint32(id))
			}
			var dirty []uint32
			for _, c := range ints("dirty") {
				dirty = append(dirty, uint32(c))
			}
			if d.Cmd == "assignment" {
				return claimText(t, d, spec, osds, dirty, views, arg("kind"), arg("move"))
			}
			p := Plan(osds, dirty, views, spec)
			if err := p.check(osds, views); err != nil {
				d.Fatalf(t, "invariant: %v", err)
			}
			var b strings.Builder
			fmt.Fprintf(&b, "rewrite=%v move=%v sources=%v waiting=%v crowded=%v\n", p.Rewrite, p.Move, p.Sources, p.Waiting, p.Crowded)
			fmt.Fprintf(&b, "degraded=%v work=%v", p.Degraded(), p.NeedsWork())
			if p.Unrepairable {
				fmt.Fprintf(&b, "\nunrepairable: %s", p.Why)
			}
			if p.Lost {
				fmt.Fprintf(&b, "\nlost: %s", p.LostWhy)
			}
			return b.String()
		})
	})
}

// claimText is DecideAssignment's decision for the file and cluster an assignment
// transcript line describes; OSDs up and not draining are candidates.
func claimText(t *testing.T, d *datadriven.TestData, spec layout.Spec, osds, dirty []uint32, views map[uint32]cluster.View, kind, move string) string {
	var up []placement.Candidate
	for _, id := range slices.Sorted(maps.Keys(views)) {
		if v := views[id]; v.State == cluster.StateUp && !v.Drain {
			up = append(up, placement.Candidate{ID: id, FreeBytes: 1 << 30})
		}
	}
	var m *Move
	if move != "" {
		f := strings.Split(move, ":")
		c, _ := strconv.Atoi(f[0])
		from, _ := strconv.Atoi(f[1])
		to, _ := strconv.Atoi(f[2])
		m = &Move{Comp: c, From: uint32(from), To: uint32(to), Bytes: 1}
	}
	l := layout.Layout{Spec: spec, Groups: len(osds) / spec.Width(), OSDs: osds, Version: 1}
	c, ok, err := DecideAssignment(l, dirty, views, kind, m, placement.NewPool(up), rand.New(rand.NewPCG(1, 2)))
	switch {
	case err != nil:
		return "error: " + err.Error()
	case !ok:
		return "nothing to assign"
	}
	out := fmt.Sprintf("%s comps=%v sources=%v osds=%v", c.Kind, c.Comps, c.Sources, c.OSDs)
	if len(c.MoveFrom) > 0 {
		out += fmt.Sprintf(" copy-from=%v", c.MoveFrom)
	}
	if len(c.GCComps) > 0 {
		out += fmt.Sprintf("\ndelete afterwards: comps %v on %v", c.GCComps, c.GCOSDs)
	}
	return out
}
