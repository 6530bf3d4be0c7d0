package mds

import (
	"testing"
	"time"
)

// With several MDS processes a repair lock's lease is counted on the
// judging process's clock from its first sight of the lock, whatever the
// stamp another machine's clock put on it: a lock stamped by a clock an
// hour behind (already "expired" by the stamp) still holds a lease here,
// and one stamped by a clock an hour ahead expires a lease after it was
// first seen, not an hour later.
func TestRepairLockIsCountedOnTheJudgesClock(t *testing.T) {
	var r repairSights
	now := time.Unix(2_000_000, 0)
	behind := &repairLock{UntilNs: now.Add(-time.Hour).UnixNano()}
	ahead := &repairLock{UntilNs: now.Add(time.Hour).UnixNano()}
	if !r.active(7, behind, now) || !r.active(8, ahead, now) {
		t.Fatal("a lock first seen now does not hold")
	}
	if !r.active(7, behind, now.Add(repairLease-time.Second)) {
		t.Fatal("a lock seen a lease ago, less a second, no longer holds")
	}
	if r.active(7, behind, now.Add(repairLease)) || r.active(8, ahead, now.Add(repairLease)) {
		t.Fatal("a lock holds past a lease from its first sight")
	}
	// A new claim of the same file (a new stamp) is a new lock.
	again := &repairLock{UntilNs: ahead.UntilNs + 1}
	if !r.active(8, again, now.Add(repairLease)) {
		t.Fatal("a new claim of the file does not hold")
	}
	if r.active(8, nil, now) {
		t.Fatal("no lock holds")
	}
}
