package repair

import (
	"fmt"
	"slices"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/invariants"
	"github.com/braidfs/braid/internal/layout"
)

// FilePlan is what one file needs to regain full redundancy. It is decided
// from the file's layout, its dirty set and the OSDs' states alone: a pure
// function, so the rules are tested without a cluster.
type FilePlan struct {
	// Rewrite lists components to write: moved ones (Move) on their new
	// OSD, the rest in place.
	Rewrite []int
	// Move lists the components that must leave their OSD (out, unknown or
	// draining).
	Move []int
	// Sources are the components a repair may read: on an up OSD, not
	// dirty and not being rewritten.
	Sources []int
	// Waiting lists dirty or unreachable components that cannot be
	// repaired yet (their OSD is down but not out): reads go around them.
	Waiting []int
	// Crowded lists components sharing an OSD with another component of
	// their parity group (placed so when the cluster had too few OSDs);
	// they are moved once an OSD outside the group is up.
	Crowded []int
	// Unrepairable is set when some parity group has fewer sources than it
	// needs to decode; Why says which.
	Unrepairable bool
	Why          string
	// Lost is set when some parity group would have fewer than K clean
	// components even if every OSD came back: more are dirty (lost
	// objects, missed writes) or on OSDs removed from the cluster than
	// its parity rebuilds. LostWhy says which. (While a repair runs, moved
	// components are listed dirty though their old copies still read:
	// callers judge Lost only without one.)
	Lost    bool
	LostWhy string
}

// Degraded reports whether the file lacks any redundancy right now: some
// component is missing, unreadable or stale. Components being moved off a
// draining OSD or apart from a crowded one still count as present.
func (p FilePlan) Degraded() bool {
	if len(p.Waiting) > 0 || p.Unrepairable {
		return true
	}
	for _, c := range p.Rewrite {
		if !slices.Contains(p.Sources, c) && !slices.Contains(p.Crowded, c) {
			return true
		}
	}
	return false
}

// NeedsWork reports whether a repair can do something now.
func (p FilePlan) NeedsWork() bool { return len(p.Rewrite) > 0 && !p.Unrepairable }

// Plan classifies every component of a layout placed on osdsOf. A component is moved when its
// OSD is out, unknown or draining; rewritten in place when it is dirty and
// its OSD is up; left waiting when its OSD is down (it may come back and be
// caught up instead of rebuilt). A group whose rewrites need decoding must
// keep K sources; a moved component whose old OSD is up (drain) is copied
// and needs no decoding.
func Plan(osdsOf []uint32, dirty []uint32, osds map[uint32]cluster.View, spec layout.Spec) FilePlan {
	p := plan(osdsOf, dirty, osds, spec)
	if invariants.Enabled {
		invariants.Must(p.check(osdsOf, osds))
	}
	return p
}

func plan(osdsOf []uint32, dirty []uint32, osds map[uint32]cluster.View, spec layout.Spec) FilePlan {
	var p FilePlan
	w := spec.Width()
	for c, id := range osdsOf {
		v, known := osds[id]
		isDirty := slices.Contains(dirty, uint32(c))
		switch {
		case !known || v.State == cluster.StateOut:
			p.Move = append(p.Move, c)
			p.Rewrite = append(p.Rewrite, c)
		case v.Drain:
			p.Move = append(p.Move, c)
			p.Rewrite = append(p.Rewrite, c)
			if !isDirty && v.State == cluster.StateUp {
				p.Sources = append(p.Sources, c) // copied as itself; may also decode others
			}
		case v.State == cluster.StateDown:
			p.Waiting = append(p.Waiting, c)
		case isDirty:
			p.Rewrite = append(p.Rewrite, c)
		default:
			p.Sources = append(p.Sources, c)
		}
	}
	p.planCrowded(osdsOf, osds, w)
	for g := 0; g < len(osdsOf)/w; g++ {
		lo, hi := g*w, (g+1)*w
		inGroup := func(c int) bool { return c >= lo && c < hi }
		sources := countIf(p.Sources, inGroup)
		needDecode := 0
		for _, c := range p.Rewrite {
			if inGroup(c) && !slices.Contains(p.Sources, c) {
				needDecode++
			}
		}
		if needDecode > 0 && sources < spec.K {
			p.Unrepairable = true
			p.Why = fmt.Sprintf("parity group %d has %d readable components, needs %d", g, sources, spec.K)
		}
		if clean := CleanInGroup(osdsOf, dirty, osds, lo, hi); clean < spec.K && !p.Lost {
			p.Lost = true
			p.LostWhy = fmt.Sprintf("parity group %d: %d of %d components lost or missed writes, %d left where %d are needed",
				g, w-clean, w, clean, spec.K)
		}
	}
	return p
}

// CleanInGroup counts the components in [lo, hi) that are not dirty and
// whose OSD the cluster still knows (up, down, draining, or out: an OSD
// out after a long silence, a rack's power cut, may come back whole):
// what the group could read if every OSD returned.
func CleanInGroup(osdsOf []uint32, dirty []uint32, osds map[uint32]cluster.View, lo, hi int) int {
	n := 0
	for c := lo; c < hi; c++ {
		if _, known := osds[osdsOf[c]]; known && !slices.Contains(dirty, uint32(c)) {
			n++
		}
	}
	return n
}

// planCrowded finds components that share an OSD with an earlier
// component of their group, and schedules a move for each when some up,
// non-draining OSD outside the group could take it.
func (p *FilePlan) planCrowded(osdsOf []uint32, osds map[uint32]cluster.View, w int) {
	for g := 0; g < len(osdsOf)/w; g++ {
		group := osdsOf[g*w : (g+1)*w]
		free := -1 // counted at the first crowded component: a walk of every OSD
		for i := 1; i < w; i++ {
			c := g*w + i
			if !slices.Contains(group[:i], group[i]) {
				continue
			}
			p.Crowded = append(p.Crowded, c)
			if free < 0 {
				free = 0
				for id, v := range osds {
					if v.State == cluster.StateUp && !v.Drain && !slices.Contains(group, id) {
						free++
					}
				}
			}
			// One on a down OSD waits with it (moved once the OSD is out,
			// apart once it is back): moving it now listed it both
			// waiting and rewritten (found by the core simulation).
			if free > 0 && !slices.Contains(p.Rewrite, c) && !slices.Contains(p.Waiting, c) {
				free--
				p.Move = append(p.Move, c)
				p.Rewrite = append(p.Rewrite, c)
				if i := slices.Index(p.Sources, c); i >= 0 {
					p.Sources = slices.Delete(p.Sources, i, i+1)
				}
			}
		}
	}
}

func countIf(xs []int, f func(int) bool) int {
	n := 0
	for _, x := range xs {
		if f(x) {
			n++
		}
	}
	return n
}

// check: every component is in exactly one of Sources, Rewrite and
// Waiting, except a draining one being copied (a source and rewritten);
// a moved component is rewritten; a waiting one's OSD is down; and an
// unrepairable or lost plan says why.
func (p FilePlan) check(osdsOf []uint32, osds map[uint32]cluster.View) error {
	for c := range osdsOf {
		src, rw, wait := slices.Contains(p.Sources, c), slices.Contains(p.Rewrite, c), slices.Contains(p.Waiting, c)
		n := 0
		for _, in := range []bool{src, rw, wait} {
			if in {
				n++
			}
		}
		switch {
		case n == 2 && src && rw && osds[osdsOf[c]].Drain:
		case n != 1:
			return fmt.Errorf("component %d: source %v, rewritten %v, waiting %v", c, src, rw, wait)
		}
		if wait && osds[osdsOf[c]].State != cluster.StateDown {
			return fmt.Errorf("component %d waits on an OSD that is %q", c, osds[osdsOf[c]].State)
		}
	}
	for _, c := range p.Move {
		if !slices.Contains(p.Rewrite, c) {
			return fmt.Errorf("component %d moves but is not rewritten", c)
		}
	}
	if p.Unrepairable && p.Why == "" || p.Lost && p.LostWhy == "" {
		return fmt.Errorf("unrepairable %v or lost %v without a reason", p.Unrepairable, p.Lost)
	}
	return nil
}
