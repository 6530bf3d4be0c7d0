package repair

import (
	"math/rand/v2"
	"slices"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/layout"
)

// Assignment is what handing a file to a worker decides: the work, the
// layout it is done under, and the objects it leaves for deletion.
type Assignment struct {
	// Kind is what the worker does: a scrub asked of a file that needs
	// repair becomes a rebuild (repair first; scrub what is healthy).
	Kind string
	Plan FilePlan
	// OSDs is the new layout's OSD list (its version one past the old).
	OSDs []uint32
	// Comps are the components to write (dirty until the worker is done);
	// Sources those it may read.
	Comps, Sources []uint32
	// MoveFrom names, per moved component that can be copied as itself,
	// the OSD it is copied from.
	MoveFrom map[uint32]uint32
	// GCComps on GCOSDs are the objects the moved components leave,
	// deleted once the repair is done and capabilities expire.
	GCComps, GCOSDs []uint32
}

// DecideAssignment decides the assignment of a file placed as l with dirty
// components: kind is what the caller asks (KindRebuild or KindScrub),
// move a rebalancing move (nil: none), up the OSDs a moved component
// may go to. ok is false when the file needs nothing of the kind.
func DecideAssignment(l layout.Layout, dirty []uint32, views map[uint32]cluster.View, kind string, move *Move, up *placement.Pool, rng *rand.Rand) (c Assignment, ok bool, err error) {
	plan := Plan(l.OSDs, dirty, views, l.Spec)
	var forced []uint32
	if move != nil && !plan.NeedsWork() && !plan.Degraded() {
		if forced = move.Apply(l.OSDs, l.Spec.Width()); forced == nil {
			return Assignment{}, false, nil
		}
		plan.Move, plan.Rewrite = []int{move.Comp}, []int{move.Comp}
	}
	if kind == KindRebuild && !plan.NeedsWork() {
		return Assignment{}, false, nil
	}
	if kind == KindScrub && (plan.Degraded() || len(dirty) > 0) {
		kind = KindRebuild // repair first; scrub what is healthy
		if !plan.NeedsWork() {
			return Assignment{}, false, nil
		}
	}
	c = Assignment{Kind: kind, Plan: plan, OSDs: l.OSDs, Comps: toU32(plan.Rewrite), Sources: toU32(plan.Sources)}
	switch {
	case forced != nil:
		c.OSDs = forced
	case len(plan.Move) > 0:
		if c.OSDs, err = up.Replace(l, plan.Move, rng); err != nil {
			return Assignment{}, false, err
		}
	}
	for _, comp := range plan.Move {
		if views[l.OSDs[comp]].State == cluster.StateUp && slices.Contains(plan.Sources, comp) {
			if c.MoveFrom == nil {
				c.MoveFrom = map[uint32]uint32{}
			}
			c.MoveFrom[uint32(comp)] = l.OSDs[comp]
		}
		c.GCComps, c.GCOSDs = append(c.GCComps, uint32(comp)), append(c.GCOSDs, l.OSDs[comp])
	}
	return c, true, nil
}

func toU32(xs []int) []uint32 {
	out := make([]uint32, len(xs))
	for i, x := range xs {
		out[i] = uint32(x)
	}
	return out
}
