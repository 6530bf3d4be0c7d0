// Package staged decides the two-phase commit of partial-stripe writes
// (Sigma's two-phase commit, Slice's intention log): what a writer does
// after it staged its units and after it applied them, what the MDS
// answers to a commit, and what the MDS's resolver does with each unit of
// an intent past its lifetime. It does no I/O: the client (stage.go), the
// MDS (intent.go) and the OSDs (osd/stage.go) drive it, and the
// transcripts in testdata name every interleaving it decides.
//
// The protocol: (1) the writer records an intent at the MDS (which
// components, which layout version); (2) stages every unit on its OSD
// (durable, the object untouched); (3) commits the intent at the MDS, the
// commit point; (4) applies every stage, then closes the intent. Every
// step may be sent again: a commit sent again answers committed, an
// intent past its lifetime cannot be committed (the resolver is rolling
// it back), and an OSD keeps the outcome of each stage (a tombstone), so
// an apply sent again is done and "not found" means never staged.
package staged

import "slices"

// Outcome is what one unit's request to its OSD came to, as the caller
// classified the answer.
type Outcome uint8

const (
	// Done: the OSD did it, or had done it (its tombstone says so).
	Done Outcome = iota
	// Moved: refused because the file's layout moved on (a stale or
	// denied capability): a repair is replacing components.
	Moved
	// Broken: the OSD answers but cannot do it however often asked (a
	// block fails its checksum, the disk fails, the object is lost, the
	// stage was aborted or never there).
	Broken
	// Unreachable: no answer, or one that may change (down, busy).
	Unreachable
)

func (o Outcome) String() string {
	return [...]string{"done", "moved", "broken", "unreachable"}[o]
}

// Unit is one component's outcome.
type Unit struct {
	Comp int
	Out  Outcome
}

// AfterStage is the writer's decision once every unit was staged.
type AfterStage struct {
	// Restage: the layout moved under the write; abort what was staged,
	// close the intent, and stage the stripe again under the new layout.
	Restage bool
	// Abort: more units failed than the layout tolerates; abort what
	// was staged, close the intent, and fail the write.
	Abort bool
	// MarkDirty are the units that failed, recorded dirty before the
	// commit (readers then decode them; a repair rewrites them).
	MarkDirty []int
	// Commit: go on to the commit point.
	Commit bool
}

// Staged decides after staging: units' outcomes, and how many failed
// units the layout tolerates in each parity group of groupWidth
// components (component c is in group c/groupWidth). A write of several
// stripes may span groups: it fails only if one group lost too many.
func Staged(units []Unit, tolerates, groupWidth int) AfterStage {
	var failed []int
	perGroup := map[int]int{}
	for _, u := range units {
		switch u.Out {
		case Moved:
			return AfterStage{Restage: true}
		case Done:
		default:
			failed = append(failed, u.Comp)
			perGroup[u.Comp/max(1, groupWidth)]++
		}
	}
	for _, n := range perGroup {
		if n > tolerates {
			return AfterStage{Abort: true}
		}
	}
	slices.Sort(failed)
	return AfterStage{MarkDirty: failed, Commit: true}
}

// AfterApply is the writer's decision once every staged unit was applied
// (past the commit point: nothing is undone).
type AfterApply struct {
	// MarkDirty are the units not applied: readers decode them until
	// they are applied or rebuilt.
	MarkDirty []int
	// Close: close the intent now. Either every unit was applied, or
	// every unit not applied is Broken (no retry would apply it: its
	// stage is aborted and the unit left to its rebuild, as the resolver
	// would once the intent expired; leaving it to expire would hold the
	// file's repairs back meanwhile). Otherwise the intent stays for the
	// resolver, which applies the rest once their OSDs answer.
	Close bool
	// AbortBroken: abort the stages of the units in MarkDirty first.
	AbortBroken bool
}

// Applied decides after applying.
func Applied(units []Unit) AfterApply {
	var failed []int
	transient := false
	for _, u := range units {
		if u.Out == Done {
			continue
		}
		failed = append(failed, u.Comp)
		transient = transient || u.Out != Broken
	}
	slices.Sort(failed)
	return AfterApply{MarkDirty: failed, Close: !transient, AbortBroken: len(failed) > 0 && !transient}
}

// IntentState is an intent's state at the MDS.
type IntentState uint8

const (
	Prepared IntentState = iota
	Committed
)

// CommitAnswer is the MDS's answer to a commit.
type CommitAnswer uint8

const (
	// CommitNow: the intent is committed by this request.
	CommitNow CommitAnswer = iota
	// AlreadyCommitted: a copy sent again after its answer was lost.
	AlreadyCommitted
	// Expired: past its lifetime; the resolver is rolling it back.
	Expired
	// Unknown: no such prepared intent (rolled back, or never begun).
	Unknown
)

// Commit decides the MDS's answer to a commit of an intent found (or
// not) in state, expired or not.
func Commit(found bool, state IntentState, expired bool) CommitAnswer {
	switch {
	case found && state == Committed:
		return AlreadyCommitted
	case !found || state != Prepared:
		return Unknown
	case expired:
		return Expired
	}
	return CommitNow
}

// OSDState is how the MDS sees the OSD holding a unit.
type OSDState uint8

const (
	Up OSDState = iota
	Down
	Gone // out of the cluster, or unknown
)

// Action is what the resolver does with one unit of an expired intent.
type Action uint8

const (
	// Send the apply (committed) or abort (prepared) to the OSD.
	Send Action = iota
	// Lost: the unit was never applied and cannot be: mark it dirty (it
	// is rebuilt from the rest).
	Lost
	// Drop: nothing to do (an abort of a stage on an OSD that is gone).
	Drop
	// Wait: leave the unit, and the intent, for a later pass.
	Wait
)

func (a Action) String() string { return [...]string{"send", "lost", "drop", "wait"}[a] }

// Resolve decides what the resolver does with a unit of an intent past
// its lifetime, before asking its OSD.
func Resolve(state IntentState, osd OSDState) Action {
	switch {
	case osd == Gone && state == Committed:
		return Lost
	case osd == Gone:
		return Drop
	case osd == Down:
		return Wait
	}
	return Send
}

// Resolved decides after the resolver asked the OSD.
func Resolved(state IntentState, out Outcome) Action {
	switch {
	case out == Done:
		return Drop
	case out == Broken && state == Committed:
		return Lost // its stage is aborted; the unit is rebuilt
	case out == Broken:
		return Drop
	}
	return Wait
}
