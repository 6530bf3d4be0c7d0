package mds

import (
	"testing"
	"time"
)

// With several MDS processes a stamped deadline is counted on the judging
// process's clock from its first sight of the record, whatever the stamp
// another machine's clock put on it: one stamped by a clock an hour
// behind (already past by the stamp) still has its window here, and one
// stamped by a clock an hour ahead passes a window after it was first
// seen, not an hour later. A new stamp on the same record is a new
// deadline.
func TestStampedDeadlinesAreCountedOnTheJudgesClock(t *testing.T) {
	var tab sights
	now := time.Unix(2_000_000, 0)
	const window = 10 * time.Minute
	behind := sightID{kind: sightRepair, key: "7", stamp: now.Add(-time.Hour).UnixNano()}
	ahead := sightID{kind: sightRepair, key: "8", stamp: now.Add(time.Hour).UnixNano()}
	if at, _ := tab.passes(behind, window, now); !at.Equal(now.Add(window)) {
		t.Fatalf("a record stamped an hour behind passes at %v, want a window after its first sight", at)
	}
	if at, _ := tab.passes(ahead, window, now.Add(time.Minute)); !at.Equal(now.Add(time.Minute + window)) {
		t.Fatalf("a record stamped an hour ahead passes at %v", at)
	}
	if at, _ := tab.passes(behind, window, now.Add(5*time.Minute)); !at.Equal(now.Add(window)) {
		t.Fatalf("seen again later, its deadline moved to %v", at)
	}
	again := ahead
	again.stamp++
	if at, _ := tab.passes(again, window, now.Add(20*time.Minute)); !at.Equal(now.Add(30 * time.Minute)) {
		t.Fatalf("a new stamp on the record passes at %v", at)
	}
}

// A table full of records not yet due (a mass removal) does not hold new
// deadlines back: the caller judges them by their stamps, as one process
// does; records passed long ago make room.
func TestFullSightTableFallsBackToStamps(t *testing.T) {
	var tab sights
	now := time.Unix(2_000_000, 0)
	for i := range maxSightKeys {
		if _, ok := tab.passes(sightID{kind: sightDelete, stamp: int64(i)}, time.Minute, now); !ok {
			t.Fatalf("table full at %d records", i)
		}
	}
	if _, ok := tab.passes(sightID{kind: sightDelete, stamp: -1}, time.Minute, now); ok {
		t.Fatal("a full table counted one more record")
	}
	later := now.Add(time.Minute + maxSightWindow + time.Second)
	if _, ok := tab.passes(sightID{kind: sightDelete, stamp: -1}, time.Minute, later); !ok {
		t.Fatal("records passed long ago did not make room")
	}
}
