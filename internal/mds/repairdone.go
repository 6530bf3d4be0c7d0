package mds

// A worker's report: what a repair or scrub did to a file, recorded in
// its inode, the repair statistics and the file events (damage.go).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// report records a worker's result. The written components leave the
// dirty set unless a source was itself found dirty meanwhile (a writer
// reported a failed write to it): then its decoded output is suspect and
// the file is repaired again.
func (q *repairQueue) report(ctx context.Context, req mdsproto.RepairDoneReq) (struct{}, error) {
	now := q.cfg.Now()
	q.mu.Lock()
	cl, _ := q.assignments.Get(req.Ino)
	why := claimWhy{text: cl.Why, balance: cl.Balance}
	q.mu.Unlock()
	failed := req.Err
	var path string
	_, err := q.shell.updateInode(ctx, req.Ino, func(tx kv.Txn, rec *inodeRec) error {
		if rec.Repair == nil || rec.Repair.Version != req.Version || rec.Layout == nil || rec.Layout.Version != req.Version {
			failed = "repair lock lost"
			return nil
		}
		path = pathOf(tx, rec)
		tainted := rec.Repair.Tainted
		rec.Repair = nil
		if req.Lost != "" {
			return noteLost(tx, req.Ino, req.Lost, now.UnixNano())
		}
		if failed != "" {
			return nil
		}
		if tainted {
			failed = "a writer reported a component being repaired as dirty"
			return nil
		}
		for _, c := range req.Sources {
			// A copied component is its own source and was listed dirty
			// by the assignment; any other source that is dirty now was marked
			// by a writer during the repair.
			if slices.Contains(rec.Dirty, c) && !slices.Contains(req.Comps, c) {
				failed = "a source component went dirty during the repair"
				return nil
			}
		}
		rec.Dirty = slices.DeleteFunc(rec.Dirty, func(c uint32) bool { return slices.Contains(req.Comps, c) })
		if len(rec.Dirty) == 0 {
			rec.Dirty = nil
		}
		pruneDirtyBy(rec)
		// Read whole again (a lost object restored, or what was dirty
		// decoded from the rest): not lost now. If some other part still
		// is, the next reader or scrub says so again.
		return tx.Delete(lostKey(req.Ino))
	})
	if wire.CodeOf(err) != wire.ErrNotFound {
		q.labels.queue(req.Ino) // new objects need their labels
	}
	// The assignment ends in the same critical section as its counters move,
	// so a status never sees it neither active nor counted.
	q.mu.Lock()
	defer q.mu.Unlock()
	q.assignments.Done(req.Ino, req.Version)
	delete(q.noSpace, req.Ino) // noted again below if this attempt failed for space
	if wire.CodeOf(err) == wire.ErrNotFound {
		return struct{}{}, nil // removed meanwhile
	}
	if err != nil {
		return struct{}{}, err
	}
	q.done = append(q.done, doneMark{at: now, bytes: req.Bytes})
	q.stats.BytesDone += req.Bytes
	if req.Read > 0 {
		q.scrubDone = append(q.scrubDone, doneMark{at: now, bytes: req.Read})
		q.stats.ScrubBytes += req.Read
	}
	if failed == "repair lock lost" {
		req.Lost = "" // this attempt decided nothing
	}
	if e, ok := repairEvent(req, failed, why.text, path, now.UnixNano()); ok && !why.balance {
		q.noteFileEventLocked(e)
	}
	if failed == mdsproto.RepairInterrupted {
		if req.Kind == mdsproto.RepairScrub && !q.scrubIn[req.Ino] {
			q.scrubIn[req.Ino] = true // scrubbed later, not dropped
			q.scrubQ = append(q.scrubQ, req.Ino)
			q.stats.ScrubTaken-- // taken again when it is assigned again
		}
		q.noteRepairErrLocked(req.Ino, failed)
		return struct{}{}, nil
	}
	if failed != "" {
		if req.Kind == mdsproto.RepairScrub {
			q.stats.ScrubFailed++
		}
		q.assignments.Backoff(req.Ino, now.Add(repairBackoff))
		q.noteRepairErrLocked(req.Ino, failed)
		return struct{}{}, nil
	}
	if req.Kind == mdsproto.RepairScrub {
		q.stats.ScrubbedFiles++
		q.stats.ScrubRepaired += req.Repaired
		if len(q.scrubQ) == 0 {
			q.stats.LastScrubEndNs = now.UnixNano()
		}
	} else {
		if why.balance {
			q.stats.BalanceBytes += req.Bytes
		} else {
			q.stats.FilesDone++
		}
		delete(q.noSpace, req.Ino)
		line := fmt.Sprintf("inode %d: %s (%d bytes written)", req.Ino, why.text, req.Bytes)
		q.recent = append(q.recent, line)
		if len(q.recent) > maxRecentRepairs {
			q.recent = q.recent[1:]
		}
		q.cfg.Log.Info("repaired", "ino", req.Ino, "why", why.text, "bytes", req.Bytes)
	}
	return struct{}{}, nil
}

func (q *repairQueue) noteRepairErr(ino uint64, msg string, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.assignments.Backoff(ino, now.Add(repairBackoff))
	q.noteRepairErrLocked(ino, msg)
}

func (q *repairQueue) noteRepairErrLocked(ino uint64, msg string) {
	if msg == mdsproto.RepairInterrupted {
		q.cfg.Log.Info("repair interrupted", "ino", ino, "why", msg)
		return
	}
	if strings.Contains(msg, wire.ErrNoSpace.Error()) && len(q.noSpace) < maxNoSpaceTracked {
		q.noSpace[ino] = true
	}
	q.cfg.Log.Warn("repair failed", "ino", ino, "err", msg)
	q.errs = append(q.errs, msg)
	if len(q.errs) > maxRepairErrLog {
		q.errs = q.errs[1:]
	}
}

// activeCount is the number of assignments whose worker may still report.
func (q *repairQueue) activeCount(now time.Time) int {
	rebuild, scrub, balance := q.activeKinds(now)
	return rebuild + scrub + balance
}

// activeKinds counts the files being worked on by what is done to them
// (repair.Assignments.ActiveKinds).
func (q *repairQueue) activeKinds(now time.Time) (rebuild, scrub, balance int) {
	return q.assignments.ActiveKinds(now)
}

// rate is the repair write rate over the last rateWindow.
func (q *repairQueue) rate(now time.Time) float64 {
	var r float64
	q.done, r = windowRate(q.done, now)
	return r
}

// scrubRate is the scrub read rate over the last rateWindow.
func (q *repairQueue) scrubRate(now time.Time) float64 {
	var r float64
	q.scrubDone, r = windowRate(q.scrubDone, now)
	return r
}

// windowRate drops marks older than rateWindow and returns the rest, with
// their bytes per second over the window.
func windowRate(marks []doneMark, now time.Time) ([]doneMark, float64) {
	var sum int64
	keep := marks[:0]
	for _, d := range marks {
		if now.Sub(d.at) <= rateWindow {
			keep = append(keep, d)
			sum += d.bytes
		}
	}
	return keep, float64(sum) / rateWindow.Seconds()
}
