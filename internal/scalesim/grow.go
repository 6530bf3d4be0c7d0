package scalesim

import (
	"fmt"
	"slices"

	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/core/route"
)

// growth is what adding 10% more OSDs (and one more MDS process) costs.
type growth struct {
	AddedOSDs    int
	MovedBytes   int64   // moved by the balancer until even
	IdealBytes   int64   // the new OSDs' fair share: the least any scheme moves
	Moves        int64   // component moves (all the sampled files stand for)
	SpreadAfter  float64 // max over mean of bytes per OSD, once balanced
	SlotsMoved   int     // routing slots a new MDS process takes
	SlotsOf      int     // slots in all
	BalanceSteps int     // balancer decisions run
}

// maxBalanceSteps bounds the balancer's targets in one growth, and
// movesPerTarget the moves made between one pair.
const (
	maxBalanceSteps = 200_000
	movesPerTarget  = 64
)

// grow adds racks holding 10% more OSDs and runs the MDS's balancer
// (repair.Target picks the fullest and emptiest OSDs; repair.PickMove
// the component to move) until it says the cluster is even.
func (w *world) grow() growth {
	before := len(w.osds)
	racks := max(1, w.cfg.Racks/10)
	w.addRacks(racks)
	g := growth{AddedOSDs: len(w.osds) - before}
	var total int64
	for _, b := range w.est {
		total += b
	}
	g.IdealBytes = int64(float64(total) * float64(g.AddedOSDs) / float64(len(w.osds))) // (as a product it overflows)
	views := w.views(nil)
	slack := int64(w.cfg.OSDBytes / 1000)
	even := max(slack, total/int64(len(w.osds))/10) // Target's rule for "balanced"
	for g.BalanceSteps < maxBalanceSteps {
		g.BalanceSteps++
		hi, lo, diff, ok := repair.Target(w.est, views, slack)
		if !ok {
			break
		}
		// Moves between the pair Target chose, each one PickMove's,
		// until their gap is even (the MDS asks Target before each
		// assignment; asking once for a run of moves keeps 10,000 OSDs fast).
		moved := 0
		for ; moved < movesPerTarget && diff > even; moved++ {
			if !w.moveOne(hi, lo, diff, &g) {
				break
			}
			diff = w.est[hi] - w.est[lo]
		}
		if moved == 0 {
			break // nothing on the fullest OSD can move without widening the gap
		}
	}
	var maxB, sum float64
	for _, o := range w.osds {
		maxB = max(maxB, float64(w.est[o.id]))
		sum += float64(w.est[o.id])
	}
	g.SpreadAfter = maxB / (sum / float64(len(w.osds)))
	g.SlotsMoved, g.SlotsOf = w.routeGrowth()
	return g
}

// moveOne moves one component from hi to lo: of those PickMove allows,
// the largest, so a balance ends in few moves. (The MDS takes the first
// it finds in its scan; what it moves is the same, in more assignments.)
func (w *world) moveOne(hi, lo uint32, diff int64, g *growth) bool {
	best, bestBytes := -1, int64(0)
	var bestMove repair.Move
	for i, fc := range w.onOSD[hi] {
		f := &w.files[fc.file]
		n := fc.bytes
		if n <= bestBytes || n >= diff {
			continue
		}
		bytesOf := func(c int) int64 {
			if c != fc.comp {
				return 0 // the move is of this component
			}
			return n
		}
		if m, ok := repair.PickMove(f.l.OSDs, f.l.Spec.Width(), bytesOf, hi, lo, diff); ok {
			best, bestBytes, bestMove = i, n, m
		}
	}
	if best < 0 {
		return false
	}
	fc := w.onOSD[hi][best]
	f := &w.files[fc.file]
	f.l.OSDs = bestMove.Apply(f.l.OSDs, f.l.Spec.Width())
	w.est[hi] -= bestMove.Bytes
	w.est[lo] += bestMove.Bytes
	w.onOSD[hi] = slices.Delete(w.onOSD[hi], best, best+1)
	w.onOSD[lo] = append(w.onOSD[lo], fc)
	g.MovedBytes += bestMove.Bytes
	g.Moves += int64(f.weight)
	return true
}

// routeGrowth is how many slots route.Plan moves when one MDS process
// joins cfg.MDS others.
func (w *world) routeGrowth() (moved, slots int) {
	var alive []route.Server
	for i := range w.cfg.MDS {
		alive = append(alive, route.Server{Name: fmt.Sprint("mds", i), Addr: fmt.Sprint("m", i)})
	}
	before, _ := route.Plan(nil, alive)
	after, _ := route.Plan(before, append(alive, route.Server{Name: "mds-new", Addr: "new"}))
	for slot := range uint32(route.SlotCount) {
		if before.Owner(slot).Name != after.Owner(slot).Name {
			moved++
		}
	}
	return moved, route.SlotCount
}
