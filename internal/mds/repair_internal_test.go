package mds

import (
	"testing"
	"time"

	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/mdsproto"
)

// An idle, healthy cluster showed "repair: 0 files (0 B) left, 4 in
// progress" for hours: every claim counted as a repair, the scrubs of an
// abandoned `braid scrub /` too. Claims are counted by what they do.
func TestActiveClaimsCountedByKind(t *testing.T) {
	h := newRepairQueue()
	now := time.Unix(1000, 0)
	h.assignments.Record(1, repair.Assigned{At: now, Kind: mdsproto.RepairScrub})
	h.assignments.Record(2, repair.Assigned{At: now, Kind: mdsproto.RepairScrub})
	h.assignments.Record(3, repair.Assigned{At: now, Kind: mdsproto.RepairRebuild, Why: "OSD 2 is out"})
	h.assignments.Record(4, repair.Assigned{At: now, Kind: mdsproto.RepairRebuild, Why: "even out OSDs", Balance: true})
	h.assignments.Record(5, repair.Assigned{At: now.Add(-2 * repairLease), Kind: mdsproto.RepairRebuild}) // its repair worker died long ago
	rebuild, scrub, balance := h.activeKinds(now)
	if rebuild != 1 || scrub != 2 || balance != 1 {
		t.Fatalf("active claims: %d rebuilds, %d scrubs, %d moves; want 1, 2, 1", rebuild, scrub, balance)
	}
	if n := h.activeCount(now); n != 4 {
		t.Fatalf("active count %d, want 4 (an expired claim is not active)", n)
	}
}
