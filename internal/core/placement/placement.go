// Package placement decides where components go: a new file's OSDs
// (Place), a replacement for components that must move (Replace), and
// the layout a small file gets instead of its coded one (SmallFileSpec).
// The caller supplies the OSDs placement may use and the random source;
// placement does no I/O (Sigma's and Panasas's declustered placement:
// each file picks its own OSDs, weighted by free space, so rebuild reads
// spread over the whole cluster).
package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/braidfs/braid/internal/invariants"
	"github.com/braidfs/braid/internal/layout"
)

// ErrTooFewOSDs: the cluster has too few OSDs up for the layout.
var ErrTooFewOSDs = errors.New("too few OSDs")

// Candidate is an OSD placement may choose.
type Candidate struct {
	ID        uint32
	FreeBytes int64
}

// MaxGroups bounds how many parity groups one file is spread over.
const MaxGroups = 16

// Place decides where a new file's components go: groups of spec.Width()
// distinct OSDs each (a file never puts two components of one parity group
// on one OSD). It is a pure decision: the caller supplies the up OSDs and
// the randomness. Files whose size is known to fit one visit use one
// group; larger or unknown-size files use as many groups as the cluster
// can fill, which declusters both I/O and rebuild.
func Place(spec layout.Spec, sizeHint int64, up []Candidate, rng *rand.Rand) (layout.Layout, error) {
	l, err := place(spec, sizeHint, up, rng)
	if invariants.Enabled && err == nil {
		invariants.Must(checkPlaced(l, up))
	}
	return l, err
}

func place(spec layout.Spec, sizeHint int64, up []Candidate, rng *rand.Rand) (layout.Layout, error) {
	w := spec.Width()
	if len(up) < w {
		return layout.Layout{}, fmt.Errorf("%w: layout %s needs %d OSDs, cluster has %d up", ErrTooFewOSDs, spec, w, len(up))
	}
	groups := 1
	if sizeHint < 0 || sizeHint > spec.StripeBytes()*int64(spec.Visit) {
		groups = min(len(up)/w, MaxGroups)
	}
	ids := make([]uint32, 0, groups*w)
	for g := 0; g < groups; g++ {
		ids = append(ids, pickDistinct(up, w, rng)...)
	}
	return layout.Layout{Spec: spec, Groups: groups, OSDs: ids, Version: 1}, nil
}

// pickDistinct draws n distinct OSDs, each with probability weighted by
// its free space (Efraimidis–Spirakis sampling), so fuller OSDs fill
// more slowly without ever being excluded.
func pickDistinct(up []Candidate, n int, rng *rand.Rand) []uint32 {
	type keyed struct {
		id  uint32
		key float64
	}
	ks := make([]keyed, len(up))
	for i, c := range up {
		w := float64(max(c.FreeBytes, 1<<20)) // an OSD reporting no space still gets a tiny weight
		ks[i] = keyed{c.ID, math.Pow(rng.Float64(), 1/w)}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].key > ks[j].key })
	out := make([]uint32, n)
	for i := range out {
		out[i] = ks[i].id
	}
	return out
}

// SmallFileSpec is the layout a file known to be small gets instead of its
// coded one: mirrored with the same fault tolerance (Panasas mirrors small
// files; coding a few KiB costs more than it saves).
func SmallFileSpec(s layout.Spec, sizeHint int64) layout.Spec {
	if sizeHint < 0 || sizeHint >= layout.SmallFileBytes || s.Scheme == layout.Mirror {
		return s
	}
	return layout.Spec{Scheme: layout.Mirror, K: 1, M: s.M, UnitBytes: s.UnitBytes, Visit: s.Visit, Sealed: s.Sealed}
}

// Replace chooses new OSDs for the components in move, preferring one that
// holds no component of the same parity group (so one OSD failure costs a
// group at most one component). When the cluster has fewer up OSDs than
// the group is wide, a component shares an OSD with another of its group
// rather than stay missing: the group then survives any one OSD failure
// again, and the component is moved apart once an OSD is added (Crowded).
// It returns the new OSD list; the caller bumps the version.
func Replace(l layout.Layout, move []int, up []Candidate, rng *rand.Rand) ([]uint32, error) {
	out, err := replace(l, move, up, rng)
	if invariants.Enabled && err == nil {
		invariants.Must(checkReplaced(l, move, up, out))
	}
	return out, err
}

func replace(l layout.Layout, move []int, up []Candidate, rng *rand.Rand) ([]uint32, error) {
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
			return nil, fmt.Errorf("%w: no up OSD can take component %d", ErrTooFewOSDs, c)
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

// checkPlaced: a new layout is valid, uses only candidates, and never
// puts two components of one parity group on one OSD.
func checkPlaced(l layout.Layout, up []Candidate) error {
	if err := l.Validate(); err != nil {
		return err
	}
	w := l.Spec.Width()
	for g := range l.Groups {
		group := l.OSDs[g*w : (g+1)*w]
		for i, id := range group {
			if !slices.ContainsFunc(up, func(c Candidate) bool { return c.ID == id }) {
				return fmt.Errorf("OSD %d placed but not a candidate", id)
			}
			if slices.Contains(group[:i], id) {
				return fmt.Errorf("parity group %d holds OSD %d twice: %v", g, id, group)
			}
		}
	}
	return nil
}

// checkReplaced: only the components in move changed, each to a
// candidate other than the OSD it left.
func checkReplaced(l layout.Layout, move []int, up []Candidate, out []uint32) error {
	if len(out) != len(l.OSDs) {
		return fmt.Errorf("replaced layout has %d components, had %d", len(out), len(l.OSDs))
	}
	for c, id := range out {
		if !slices.Contains(move, c) {
			if id != l.OSDs[c] {
				return fmt.Errorf("component %d moved from OSD %d to %d unasked", c, l.OSDs[c], id)
			}
			continue
		}
		if id == l.OSDs[c] || !slices.ContainsFunc(up, func(x Candidate) bool { return x.ID == id }) {
			return fmt.Errorf("component %d replaced by OSD %d (was %d), not an up candidate", c, id, l.OSDs[c])
		}
	}
	return nil
}
