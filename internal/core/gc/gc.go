// Package gc decides the deletion of objects no file needs any more: a
// removed file's, and those a repair's moved components left behind.
// Each is recorded in the store (Record, key g<ino><layout version>)
// in the transaction that made it garbage, and deleted only once every
// capability that could still reach it has expired (NotBeforeNs: open
// handles keep reading until then) and no repair holds the file (the
// objects a move left behind are its copy sources until it finishes).
//
// The MDS's GC pass (internal/mds/admin.go) is the shell: it reads a
// batch of records, asks Due of each, sends the deletes ByOSD says, and
// stores what Shrink leaves: a record shrinks as OSDs confirm and goes
// when the last has, so an OSD that is down when a file is removed is
// cleaned when it returns. A delete answered done, or stale (a newer
// layout owns that object now: not ours to delete), is confirmed.
package gc

import (
	"fmt"
	"maps"
	"slices"

	"github.com/braidfs/braid/internal/invariants"
)

// Record is one file's (one layout version's) objects awaiting deletion.
type Record struct {
	Format      int      `json:"v"`
	NotBeforeNs int64    `json:"not_before_ns"` // no deletion before: open handles keep reading until their capabilities expire
	Bytes       int64    `json:"bytes"`         // estimated data the objects hold (for status)
	Comps       []uint32 `json:"comps"`         // components not yet confirmed deleted
	OSDs        []uint32 `json:"osds"`          // OSD of each entry in Comps
}

// Pair is one object of a record: a component on an OSD.
type Pair struct{ Comp, OSD uint32 }

// Valid reports whether a stored record decodes to something a pass can
// act on (a record that does not is left alone, never guessed at).
func (r *Record) Valid() bool { return len(r.Comps) == len(r.OSDs) && r.Bytes >= 0 }

// Merge adds objects to a record (a removal and a repair at one layout
// version may both queue some); the deletion waits from notBeforeNs.
func Merge(r *Record, format int, comps, osds []uint32, bytes, notBeforeNs int64) {
	r.Format = format
	r.NotBeforeNs = notBeforeNs
	r.Comps = append(r.Comps, comps...)
	r.OSDs = append(r.OSDs, osds...)
	r.Bytes += bytes
	if invariants.Enabled {
		invariants.Must(check(r))
	}
}

// Due reports whether a record's objects may be deleted now: its delay
// has passed (deadlineNs, as the caller computed it from NotBeforeNs and
// the clock it trusts) and no repair holds the file.
func Due(nowNs, deadlineNs int64, repairing bool) bool {
	return nowNs >= deadlineNs && !repairing
}

// ByOSD groups a record's components by the OSD that holds them, in OSD
// order: one delete request each.
func ByOSD(r *Record) (osds []uint32, comps map[uint32][]uint32) {
	comps = map[uint32][]uint32{}
	for i, id := range r.OSDs {
		comps[id] = append(comps[id], r.Comps[i])
	}
	return slices.Sorted(maps.Keys(comps)), comps
}

// Shrink is what is left of a record once the deleted objects were
// confirmed; gone says nothing is, and the record goes.
func Shrink(r Record, deleted map[Pair]bool) (next Record, gone bool) {
	next = r
	next.Comps, next.OSDs = nil, nil
	for i, c := range r.Comps {
		if !deleted[Pair{c, r.OSDs[i]}] {
			next.Comps, next.OSDs = append(next.Comps, c), append(next.OSDs, r.OSDs[i])
		}
	}
	if invariants.Enabled {
		invariants.Must(check(&next))
		if len(next.Comps) > len(r.Comps) {
			panic("invariant broken: a record grew as objects were deleted")
		}
	}
	return next, len(next.Comps) == 0
}

// check: every component has its OSD, and the bytes are not negative.
func check(r *Record) error {
	if !r.Valid() {
		return fmt.Errorf("record of %d components on %d OSDs, %d bytes", len(r.Comps), len(r.OSDs), r.Bytes)
	}
	return nil
}
