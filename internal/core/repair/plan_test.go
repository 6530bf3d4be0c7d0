package repair

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/layout"
)

func views(n int, set map[uint32]cluster.View) map[uint32]cluster.View {
	out := map[uint32]cluster.View{}
	for i := 1; i <= n; i++ {
		out[uint32(i)] = cluster.View{State: cluster.StateUp}
	}
	for id, v := range set {
		out[id] = v
	}
	return out
}

func without(m map[uint32]cluster.View, id uint32) map[uint32]cluster.View {
	delete(m, id)
	return m
}

func TestPlanFile(t *testing.T) {
	spec, _ := layout.Parse("ec:2+1")
	lay := layout.Layout{Spec: spec, Groups: 2, OSDs: []uint32{1, 2, 3, 4, 5, 6}}
	cases := []struct {
		name                        string
		osds                        map[uint32]cluster.View
		dirty                       []uint32
		rewrite, move, wait, crowd  []int
		degraded, work, unrepairble bool
	}{
		{name: "healthy", osds: views(6, nil)},
		{name: "down waits for the OSD", osds: views(6, map[uint32]cluster.View{2: {State: cluster.StateDown}}),
			wait: []int{1}, degraded: true},
		{name: "out is rebuilt elsewhere", osds: views(7, map[uint32]cluster.View{2: {State: cluster.StateOut}}),
			rewrite: []int{1}, move: []int{1}, degraded: true, work: true},
		{name: "unknown OSD counts as out", osds: without(views(7, nil), 5),
			rewrite: []int{4}, move: []int{4}, degraded: true, work: true},
		{name: "dirty on an up OSD is caught up in place", osds: views(6, nil), dirty: []uint32{5},
			rewrite: []int{5}, degraded: true, work: true},
		{name: "dirty on a down OSD waits", osds: views(6, map[uint32]cluster.View{6: {State: cluster.StateDown}}),
			dirty: []uint32{5}, wait: []int{5}, degraded: true},
		{name: "draining is copied, not degraded", osds: views(7, map[uint32]cluster.View{3: {State: cluster.StateUp, Drain: true}}),
			rewrite: []int{2}, move: []int{2}, work: true},
		{name: "two lost in a group of ec:2+1 is beyond repair",
			osds:    views(7, map[uint32]cluster.View{1: {State: cluster.StateOut}, 2: {State: cluster.StateOut}}),
			rewrite: []int{0, 1}, move: []int{0, 1}, degraded: true, unrepairble: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Plan(lay.OSDs, tc.dirty, tc.osds, spec)
			eq := func(what string, got, want []int) {
				if !slices.Equal(got, want) {
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			eq("rewrite", p.Rewrite, tc.rewrite)
			eq("move", p.Move, tc.move)
			eq("waiting", p.Waiting, tc.wait)
			eq("crowded", p.Crowded, tc.crowd)
			if p.Degraded() != tc.degraded || p.NeedsWork() != tc.work || p.Unrepairable != tc.unrepairble {
				t.Errorf("degraded %v work %v unrepairable %v (%s), want %v %v %v",
					p.Degraded(), p.NeedsWork(), p.Unrepairable, p.Why, tc.degraded, tc.work, tc.unrepairble)
			}
			for _, c := range p.Sources {
				if slices.Contains(p.Rewrite, c) && !tc.osds[lay.OSDs[c]].Drain {
					t.Errorf("component %d is both source and rewritten", c)
				}
			}
		})
	}
}

func TestReplaceKeepsGroupsApartWhenItCan(t *testing.T) {
	spec, _ := layout.Parse("ec:4+2")
	l := layout.Layout{Spec: spec, Groups: 1, OSDs: []uint32{1, 2, 3, 4, 5, 6}, Version: 1}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 100; trial++ {
		out, err := placement.Replace(l, []int{2}, cands(8), rng)
		if err != nil {
			t.Fatal(err)
		}
		if out[2] != 7 && out[2] != 8 {
			t.Fatalf("component 2 moved to OSD %d, which holds another component of its group", out[2])
		}
	}
	// Six OSDs, one gone: the component must share, and the layout then
	// has it crowded; with a seventh OSD up the planner moves it apart.
	up := cands(6)[1:] // OSD 1 is gone
	l.OSDs = []uint32{1, 2, 3, 4, 5, 6}
	out, err := placement.Replace(l, []int{0}, up, rng)
	if err != nil {
		t.Fatal(err)
	}
	if out[0] == 1 || !slices.Contains(out[1:], out[0]) {
		t.Fatalf("component 0 placed on OSD %d (layout %v)", out[0], out)
	}
	wl := layout.Layout{Spec: spec, Groups: 1, OSDs: out}
	p := Plan(wl.OSDs, nil, views(6, map[uint32]cluster.View{1: {State: cluster.StateOut}}), spec)
	if len(p.Crowded) != 1 || p.NeedsWork() || p.Degraded() {
		t.Fatalf("crowded layout with no spare OSD: %+v", p)
	}
	p = Plan(wl.OSDs, nil, views(7, map[uint32]cluster.View{1: {State: cluster.StateOut}}), spec)
	if len(p.Move) != 1 || !p.NeedsWork() || p.Degraded() {
		t.Fatalf("crowded layout with a spare OSD should move apart: %+v", p)
	}
	if _, err := placement.Replace(l, []int{0}, nil, rng); err == nil {
		t.Fatal("replace with no OSD up succeeded")
	}
}

func cands(n int) []placement.Candidate {
	out := make([]placement.Candidate, n)
	for i := range out {
		out[i] = placement.Candidate{ID: uint32(i + 1), FreeBytes: 1 << 30}
	}
	return out
}
