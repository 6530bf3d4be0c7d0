package mds

import (
	"testing"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
)

// An idle, healthy cluster showed "repair: 0 files (0 B) left, 4 in
// progress" for hours: every claim counted as a repair, the scrubs of an
// abandoned `braid scrub /` too. Claims are counted by what they do.
func TestActiveClaimsCountedByKind(t *testing.T) {
	h := newHealState()
	now := time.Unix(1000, 0)
	h.active[1] = claim{at: now, kind: mdsproto.RepairScrub}
	h.active[2] = claim{at: now, kind: mdsproto.RepairScrub}
	h.active[3] = claim{at: now, kind: mdsproto.RepairRebuild, why: claimWhy{text: "OSD 2 is out"}}
	h.active[4] = claim{at: now, kind: mdsproto.RepairRebuild, why: claimWhy{text: "even out OSDs", balance: true}}
	h.active[5] = claim{at: now.Add(-2 * repairLease), kind: mdsproto.RepairRebuild} // its healer died long ago
	rebuild, scrub, balance := h.activeKinds(now)
	if rebuild != 1 || scrub != 2 || balance != 1 {
		t.Fatalf("active claims: %d rebuilds, %d scrubs, %d moves; want 1, 2, 1", rebuild, scrub, balance)
	}
	if n := h.activeCount(now); n != 4 {
		t.Fatalf("active count %d, want 4 (an expired claim is not active)", n)
	}
}
