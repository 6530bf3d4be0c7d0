package mds

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// The leader's judgment of assignments whose worker's process left: an assignment
// made before the process left is dead (its file assignable, its scrub
// queued again and no longer counted as taken); one made by the
// process's next life, after it left, holds.
func TestClaimsOfAProcessThatLeft(t *testing.T) {
	h := newRepairQueue()
	t0 := time.Unix(1_000_000, 0)
	// dead judges a lock of this leader's assignments (one naming no process
	// is never taken for an inherited assignment).
	dead := func(ino, version uint64) bool { return h.assignmentDead(ino, &repairLock{Version: version}, 0) }
	h.noteActives([]string{"a", "b"}, t0)
	h.assignments.Record(7, repair.Assigned{At: t0.Add(time.Second), Version: 2, Process: "b", Kind: mdsproto.RepairScrub})
	h.assignments.Record(8, repair.Assigned{At: t0.Add(time.Second), Version: 3, Process: "a", Kind: mdsproto.RepairRebuild})
	h.stats.ScrubTaken = 1
	if dead(7, 2) || h.assignable(7, t0.Add(2*time.Second)) {
		t.Fatal("an assignment of a process still active counted as dead")
	}
	left := t0.Add(5 * time.Second)
	h.noteActives([]string{"a"}, left)
	if !dead(7, 2) || dead(7, 1) || dead(8, 3) {
		t.Fatal("assignmentDead: want only b's assignment at its own version dead")
	}
	if !h.assignable(7, left) || h.assignable(8, left) {
		t.Fatal("assignable: want b's file assignable and a's not")
	}
	if !slices.Equal(h.scrubQ, []uint64{7}) || h.stats.ScrubTaken != 0 {
		t.Fatalf("b's scrub: queue %v, taken %d; want it queued again and not counted as taken", h.scrubQ, h.stats.ScrubTaken)
	}
	if h.activeCount(left) != 2 {
		t.Fatal("a dead assignment stopped counting before another replaced it")
	}
	// b comes back and its worker is assigned the file again: that assignment holds.
	h.noteActives([]string{"a", "b"}, left.Add(time.Second))
	h.assignments.Record(7, repair.Assigned{At: left.Add(2 * time.Second), Version: 4, Process: "b", Kind: mdsproto.RepairScrub})
	if dead(7, 4) || h.assignable(7, left.Add(3*time.Second)) {
		t.Fatal("an assignment of b's next life counted as dead")
	}
}

// An assignment's process name is stored in the file's repair lock: one past a
// name's bound is refused before anything is assigned.
func TestClaimWithAnOverlongProcessNameIsRefused(t *testing.T) {
	s := &Server{repairs: newRepairQueue()}
	_, err := s.repairs.assign(t.Context(), mdsproto.RepairAssignReq{Worker: "w", Process: strings.Repeat("p", maxNameBytes+1)})
	if !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("assignment naming a %d-byte process: %v, want ErrInvalid", maxNameBytes+1, err)
	}
}
