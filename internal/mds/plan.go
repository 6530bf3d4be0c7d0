package mds

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// filePlan is what one file needs to regain full redundancy. It is decided
// from the file's layout, its dirty set and the OSDs' states alone: a pure
// function, so the rules are tested without a cluster.
type filePlan struct {
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
func (p filePlan) Degraded() bool {
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
func (p filePlan) NeedsWork() bool { return len(p.Rewrite) > 0 && !p.Unrepairable }

// planFile classifies every component of l. A component is moved when its
// OSD is out, unknown or draining; rewritten in place when it is dirty and
// its OSD is up; left waiting when its OSD is down (it may come back and be
// caught up instead of rebuilt). A group whose rewrites need decoding must
// keep K sources; a moved component whose old OSD is up (drain) is copied
// and needs no decoding.
func planFile(l *mdsproto.Layout, dirty []uint32, osds map[uint32]cluster.View, spec layout.Spec) filePlan {
	var p filePlan
	w := spec.Width()
	for c, id := range l.OSDs {
		v, known := osds[id]
		isDirty := slices.Contains(dirty, uint32(c))
		switch {
		case !known || v.State == mdsproto.StateOut:
			p.Move = append(p.Move, c)
			p.Rewrite = append(p.Rewrite, c)
		case v.Drain:
			p.Move = append(p.Move, c)
			p.Rewrite = append(p.Rewrite, c)
			if !isDirty && v.State == mdsproto.StateUp {
				p.Sources = append(p.Sources, c) // copied as itself; may also decode others
			}
		case v.State == mdsproto.StateDown:
			p.Waiting = append(p.Waiting, c)
		case isDirty:
			p.Rewrite = append(p.Rewrite, c)
		default:
			p.Sources = append(p.Sources, c)
		}
	}
	p.planCrowded(l, osds, w)
	for g := 0; g < len(l.OSDs)/w; g++ {
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
		if clean := cleanInGroup(l, dirty, osds, lo, hi); clean < spec.K && !p.Lost {
			p.Lost = true
			p.LostWhy = fmt.Sprintf("parity group %d: %d of %d components lost or missed writes, %d left where %d are needed",
				g, w-clean, w, clean, spec.K)
		}
	}
	return p
}

// cleanInGroup counts the components in [lo, hi) that are not dirty and
// whose OSD the cluster still knows (up, down, draining, or out: an OSD
// out after a long silence, a rack's power cut, may come back whole):
// what the group could read if every OSD returned.
func cleanInGroup(l *mdsproto.Layout, dirty []uint32, osds map[uint32]cluster.View, lo, hi int) int {
	n := 0
	for c := lo; c < hi; c++ {
		if _, known := osds[l.OSDs[c]]; known && !slices.Contains(dirty, uint32(c)) {
			n++
		}
	}
	return n
}

// planCrowded finds components that share an OSD with an earlier
// component of their group, and schedules a move for each when some up,
// non-draining OSD outside the group could take it.
func (p *filePlan) planCrowded(l *mdsproto.Layout, osds map[uint32]cluster.View, w int) {
	for g := 0; g < len(l.OSDs)/w; g++ {
		group := l.OSDs[g*w : (g+1)*w]
		free := 0
		for id, v := range osds {
			if v.State == mdsproto.StateUp && !v.Drain && !slices.Contains(group, id) {
				free++
			}
		}
		for i := 1; i < w; i++ {
			c := g*w + i
			if !slices.Contains(group[:i], group[i]) {
				continue
			}
			p.Crowded = append(p.Crowded, c)
			if free > 0 && !slices.Contains(p.Rewrite, c) {
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

// Replace chooses new OSDs for the components in move, preferring one that
// holds no component of the same parity group (so one OSD failure costs a
// group at most one component). When the cluster has fewer up OSDs than
// the group is wide, a component shares an OSD with another of its group
// rather than stay missing: the group then survives any one OSD failure
// again, and the component is moved apart once an OSD is added (Crowded).
// It returns the new OSD list; the caller bumps the version.
func Replace(l layout.Layout, move []int, up []Candidate, rng *rand.Rand) ([]uint32, error) {
	out := slices.Clone(l.OSDs)
	w := l.Spec.Width()
	for _, c := range move {
		g := c / w
		var apart, shared []Candidate
		for _, cand := range up {
			if cand.ID == l.OSDs[c] {
				continue // the OSD it is leaving
			}
			if !slices.Contains(out[g*w:(g+1)*w], cand.ID) && !slices.Contains(l.OSDs[g*w:(g+1)*w], cand.ID) {
				apart = append(apart, cand)
			} else {
				shared = append(shared, cand)
			}
		}
		switch {
		case len(apart) > 0:
			out[c] = pickDistinct(apart, 1, rng)[0]
		case len(shared) > 0:
			out[c] = leastShared(out[g*w:(g+1)*w], shared)
		default:
			return nil, wire.Errorf(wire.ErrUnavail, "no up OSD can take component %d", c)
		}
	}
	return out, nil
}

// leastShared picks the candidate holding the fewest components of group,
// so doubled-up components spread over the group's OSDs.
func leastShared(group []uint32, cands []Candidate) uint32 {
	best, bestN := cands[0].ID, len(group)+1
	for _, c := range cands {
		n := 0
		for _, id := range group {
			if id == c.ID {
				n++
			}
		}
		if n < bestN {
			best, bestN = c.ID, n
		}
	}
	return best
}
