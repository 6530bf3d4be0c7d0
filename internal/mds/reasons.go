package mds

import (
	"fmt"
	"slices"
	"strings"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/mdsproto"
)

// Why the MDS repairs what it repairs: each assignment carries a reason that
// the log and `braid status` show, so no repair goes unexplained.

// claimWhy says why a file was assigned, for the log and status.
type claimWhy struct {
	text    string
	balance bool // a move of a healthy component to even out OSDs
}

// maxNoSpaceTracked bounds the files remembered as waiting for space.
const maxNoSpaceTracked = 100_000

// maxRecentRepairs bounds the repairs status lists with their reasons.
const maxRecentRepairs = 8

// claimReason describes what an assignment will do and why.
func claimReason(rec *inodeRec, plan repair.FilePlan, bm *balanceMove, kind string, views map[uint32]cluster.View) claimWhy {
	if kind == mdsproto.RepairScrub {
		return claimWhy{text: "scrub"}
	}
	if bm != nil && len(plan.Move) == 1 && plan.Move[0] == bm.Comp && len(rec.Dirty) == 0 {
		return claimWhy{text: fmt.Sprintf("rebalance: component %d from OSD %d to emptier OSD %d", bm.Comp, bm.From, bm.To), balance: true}
	}
	var parts []string
	for _, c := range plan.Move {
		id := rec.Layout.OSDs[c]
		v, known := views[id]
		switch {
		case !known || v.State == mdsproto.StateOut:
			parts = append(parts, fmt.Sprintf("component %d rebuilt off OSD %d (out)", c, id))
		case v.Drain:
			parts = append(parts, fmt.Sprintf("component %d moved off draining OSD %d", c, id))
		default:
			parts = append(parts, fmt.Sprintf("component %d moved apart from its group on OSD %d", c, id))
		}
	}
	var dirty []uint32
	for _, c := range rec.Dirty {
		if !slices.Contains(plan.Move, int(c)) {
			dirty = append(dirty, c)
		}
	}
	if len(dirty) > 0 {
		parts = append(parts, fmt.Sprintf("dirty components %v caught up (marked when they missed writes or were found lost; the MDS log says why)", dirty))
	}
	return claimWhy{text: strings.Join(parts, "; ")}
}
