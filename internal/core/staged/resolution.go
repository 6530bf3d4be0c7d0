package staged

import (
	"fmt"
	"slices"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/invariants"
)

// Resolving one expired intent: Plan decides, before any OSD is asked,
// which units are sent the apply (a committed intent) or the abort (a
// prepared one), which are lost and which wait; Answer takes each asked
// OSD's answer. The caller reads the intent and the file, sends what the
// plan says, and writes what it decided: Lost marked dirty, the intent
// kept with Left only, or deleted when nothing is left.

// IntentUnit is one unit of an expired intent as the resolver finds it.
type IntentUnit struct {
	Comp      uint32
	OSD       OSDState
	HoldsData bool // its group's objects hold written data
}

// Resolution is what the resolver does with one expired intent.
type Resolution struct {
	State IntentState
	Units []IntentUnit
	Send  []int    // units whose OSD is asked, by index
	Lost  []uint32 // components never applied and not to be: marked dirty, rebuilt from the rest
	Left  []int    // units left for a later pass, by index
	Abort []int    // units whose apply broke: their stage is aborted (by index)
}

// OSDStateOf is how the resolver takes an OSD the cluster view shows as
// v (known: the view has it at all).
func OSDStateOf(v cluster.View, known bool) OSDState {
	switch {
	case !known || v.State == cluster.StateOut:
		return Gone
	case v.State != cluster.StateUp:
		return Down
	}
	return Up
}

// Plan decides each unit of an intent in state before its OSD is asked.
func Plan(state IntentState, units []IntentUnit) *Resolution {
	r := &Resolution{State: state, Units: units}
	for i, u := range units {
		switch Resolve(state, u.OSD) {
		case Lost:
			r.Lost = append(r.Lost, u.Comp)
		case Wait:
			r.Left = append(r.Left, i)
		case Send:
			r.Send = append(r.Send, i)
		}
	}
	r.assert()
	return r
}

// Apply reports whether the units are sent the apply (else the abort).
func (r *Resolution) Apply() bool { return r.State == Committed }

// MustExist reports whether the apply of unit i must find its object: the
// object holds written data, so an apply that created it would leave
// holes below the stage (the created flag alone would not survive a lost
// reply and the resend).
func (r *Resolution) MustExist(i int) bool { return r.Apply() && r.Units[i].HoldsData }

// Answer takes what unit i's OSD answered and returns what follows.
func (r *Resolution) Answer(i int, out Outcome) Action {
	a := Resolved(r.State, out)
	switch a {
	case Lost:
		// The OSD answers but cannot apply this unit (a block it merges
		// with fails its checksum, its disk fails, it never had the
		// stage): retrying would hold the file's repairs back for good,
		// so the unit is rebuilt from the rest, and its stage dropped.
		r.Lost = append(r.Lost, r.Units[i].Comp)
		r.Abort = append(r.Abort, i)
	case Wait:
		r.Left = append(r.Left, i)
		slices.Sort(r.Left) // kept in the intent's order of units
	}
	r.assert()
	return a
}

// Done reports whether nothing of the intent is left to resolve.
func (r *Resolution) Done() bool { return len(r.Left) == 0 }

func (r *Resolution) assert() {
	if invariants.Enabled {
		invariants.Must(r.check())
	}
}

// check: a unit is left, lost or aborted at most once, and only a
// committed intent loses units.
func (r *Resolution) check() error {
	seen := map[int]bool{}
	for _, i := range r.Left {
		if i < 0 || i >= len(r.Units) || seen[i] {
			return fmt.Errorf("unit %d left twice or out of range", i)
		}
		seen[i] = true
	}
	lost := map[uint32]bool{}
	for _, c := range r.Lost {
		if lost[c] {
			return fmt.Errorf("component %d lost twice", c)
		}
		lost[c] = true
	}
	if len(r.Lost) > 0 && r.State != Committed {
		return fmt.Errorf("a prepared intent lost components %v", r.Lost)
	}
	return nil
}
