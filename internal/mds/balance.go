package mds

import (
	"context"
	"time"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
)

// Rebalancing (Sigma's live rebalancing when nodes are added). The MDS
// keeps an estimate of the bytes of components each OSD holds, computed
// from the layouts; when the fullest up OSD holds more than the emptiest by
// over the slack, an idle worker is handed a healthy file with a component
// on the fullest and moves that component to the emptiest (copied, not
// decoded). Repairs always go first.

// balanceState is the MDS's estimate of where the bytes are.
type balanceState struct {
	est    map[uint32]int64 // component bytes per OSD, from layouts
	cursor []byte           // where the next search for a file to move starts
}

// refreshBalance recomputes the per-OSD estimate from every layout.
func (q *repairQueue) refreshBalance(ctx context.Context) error {
	est := map[uint32]int64{}
	err := q.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(firstKey(pInode), pastKeys(pInode), func(k, v []byte) bool {
			var rec inodeRec
			if decodeRecord(v, &rec) != nil || rec.Layout == nil {
				return true
			}
			l, err := rec.Layout.Decode()
			if err != nil {
				return true
			}
			for c, id := range l.OSDs {
				est[id] += componentBytes(&rec, l, c)
			}
			return true
		})
	})
	if err != nil {
		return err
	}
	q.mu.Lock()
	q.bal.est = est
	q.mu.Unlock()
	return nil
}

// componentBytes estimates the data component c of rec holds: its
// group's recorded extent, or what a dense file of its size holds. (The
// object length a truncation would set counts a whole unit for every
// small file: thousands of 4 KiB files looked like gigabytes, and
// rebalancing moved healthy files of a balanced cluster.)
func componentBytes(rec *inodeRec, l layout.Layout, c int) int64 {
	if g := c / l.Spec.Width(); len(rec.Extents) == l.Groups {
		return rec.Extents[g]
	}
	return l.DataLen(rec.Stored(), c)
}

// balanceLoop refreshes the estimate every BalanceEvery, or less often when
// a refresh is slow: it reads every inode, so its cost grows with the
// namespace, and waiting balanceDutyFactor times its duration in between
// keeps it to a small share of one core however many files there are.
func (q *repairQueue) balanceLoop(ctx context.Context) {
	for {
		began := time.Now()
		if !q.route.leading() {
			// another process leads: nothing to estimate here
		} else if err := q.refreshBalance(ctx); err != nil && ctx.Err() == nil {
			q.cfg.Log.Warn("balance estimate", "err", err)
		}
		wait := max(q.cfg.BalanceEvery, balanceDutyFactor*time.Since(began))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// balanceDutyFactor spaces estimate refreshes by this many times their own
// duration (at most 1/20 of a core).
const balanceDutyFactor = 20

// balanceTarget picks the fullest and emptiest up OSDs and how far apart
// they are, or ok=false when the cluster is balanced (repair.Target).
func (q *repairQueue) balanceTarget(views map[uint32]cluster.View) (hi, lo uint32, diff int64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return repair.Target(q.bal.est, views, q.cfg.BalanceSlackBytes)
}

// balanceAssign hands out one rebalancing move, if the cluster needs one.
func (q *repairQueue) balanceAssign(ctx context.Context, views map[uint32]cluster.View, now time.Time) (mdsproto.RepairTask, bool, error) {
	hi, lo, diff, ok := q.balanceTarget(views)
	if !ok {
		return mdsproto.RepairTask{}, false, nil
	}
	q.mu.Lock()
	start := q.bal.cursor
	q.mu.Unlock()
	if start == nil {
		start = firstKey(pInode)
	}
	var moves []struct {
		ino uint64
		bm  balanceMove
	}
	var last []byte
	seen := 0
	_ = q.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(start, pastKeys(pInode), func(k, v []byte) bool {
			seen++
			last = append(last[:0], k...)
			var rec inodeRec
			ino, isIno := inoOfKey(k)
			if !isIno || decodeRecord(v, &rec) != nil || rec.Layout == nil || q.sights.repairActive(rec.Ino, rec.Repair, now) {
				return seen < repairScanBatch
			}
			l, err := rec.Layout.Decode()
			if err != nil {
				return seen < repairScanBatch
			}
			bytesOf := func(c int) int64 { return componentBytes(&rec, l, c) }
			if bm, ok := repair.PickMove(l.OSDs, l.Spec.Width(), bytesOf, hi, lo, diff); ok {
				moves = append(moves, struct {
					ino uint64
					bm  balanceMove
				}{ino, bm})
			}
			return seen < repairScanBatch && len(moves) < 8
		})
	})
	q.mu.Lock()
	if seen < repairScanBatch && len(moves) < 8 {
		q.bal.cursor = nil
	} else {
		q.bal.cursor = append(last, 0)
	}
	q.mu.Unlock()
	for _, m := range moves {
		q.mu.Lock()
		assignable := q.assignable(m.ino, now)
		q.mu.Unlock()
		if !assignable {
			continue
		}
		task, ok, err := q.lockFor(ctx, m.ino, mdsproto.RepairRebuild, &m.bm, views, now)
		if err != nil || ok {
			if ok {
				q.mu.Lock()
				q.bal.est[hi] -= m.bm.Bytes
				q.bal.est[lo] += m.bm.Bytes
				q.stats.Rebalanced++
				q.mu.Unlock()
			}
			return task, ok, err
		}
	}
	return mdsproto.RepairTask{}, false, nil
}
