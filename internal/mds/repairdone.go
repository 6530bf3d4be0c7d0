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

// repairDone records a worker's result. The written components leave the
// dirty set unless a source was itself found dirty meanwhile (a writer
// reported a failed write to it): then its decoded output is suspect and
// the file is repaired again.
func (s *Server) repairDone(ctx context.Context, req mdsproto.RepairDoneReq) (struct{}, error) {
	now := s.cfg.Now()
	s.repairs.mu.Lock()
	cl, _ := s.repairs.assignments.Get(req.Ino)
	why := claimWhy{text: cl.Why, balance: cl.Balance}
	s.repairs.mu.Unlock()
	failed := req.Err
	var path string
	_, err := s.updateInode(ctx, req.Ino, func(tx kv.Txn, rec *inodeRec) error {
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
		s.queueLabel(req.Ino) // new objects need their labels
	}
	// The assignment ends in the same critical section as its counters move,
	// so a status never sees it neither active nor counted.
	s.repairs.mu.Lock()
	defer s.repairs.mu.Unlock()
	s.repairs.assignments.Done(req.Ino, req.Version)
	delete(s.repairs.noSpace, req.Ino) // noted again below if this attempt failed for space
	if wire.CodeOf(err) == wire.ErrNotFound {
		return struct{}{}, nil // removed meanwhile
	}
	if err != nil {
		return struct{}{}, err
	}
	s.repairs.done = append(s.repairs.done, doneMark{at: now, bytes: req.Bytes})
	s.repairs.stats.BytesDone += req.Bytes
	if req.Read > 0 {
		s.repairs.scrubDone = append(s.repairs.scrubDone, doneMark{at: now, bytes: req.Read})
		s.repairs.stats.ScrubBytes += req.Read
	}
	if failed == "repair lock lost" {
		req.Lost = "" // this attempt decided nothing
	}
	if e, ok := repairEvent(req, failed, why.text, path, now.UnixNano()); ok && !why.balance {
		s.noteFileEventLocked(e)
	}
	if failed == mdsproto.RepairInterrupted {
		if req.Kind == mdsproto.RepairScrub && !s.repairs.scrubIn[req.Ino] {
			s.repairs.scrubIn[req.Ino] = true // scrubbed later, not dropped
			s.repairs.scrubQ = append(s.repairs.scrubQ, req.Ino)
			s.repairs.stats.ScrubTaken-- // taken again when it is assigned again
		}
		s.noteRepairErrLocked(req.Ino, failed)
		return struct{}{}, nil
	}
	if failed != "" {
		if req.Kind == mdsproto.RepairScrub {
			s.repairs.stats.ScrubFailed++
		}
		s.repairs.assignments.Backoff(req.Ino, now.Add(repairBackoff))
		s.noteRepairErrLocked(req.Ino, failed)
		return struct{}{}, nil
	}
	if req.Kind == mdsproto.RepairScrub {
		s.repairs.stats.ScrubbedFiles++
		s.repairs.stats.ScrubRepaired += req.Repaired
		if len(s.repairs.scrubQ) == 0 {
			s.repairs.stats.LastScrubEndNs = now.UnixNano()
		}
	} else {
		if why.balance {
			s.repairs.stats.BalanceBytes += req.Bytes
		} else {
			s.repairs.stats.FilesDone++
		}
		delete(s.repairs.noSpace, req.Ino)
		line := fmt.Sprintf("inode %d: %s (%d bytes written)", req.Ino, why.text, req.Bytes)
		s.repairs.recent = append(s.repairs.recent, line)
		if len(s.repairs.recent) > maxRecentRepairs {
			s.repairs.recent = s.repairs.recent[1:]
		}
		s.cfg.Log.Info("repaired", "ino", req.Ino, "why", why.text, "bytes", req.Bytes)
	}
	return struct{}{}, nil
}

func (s *Server) noteRepairErr(ino uint64, msg string, now time.Time) {
	s.repairs.mu.Lock()
	defer s.repairs.mu.Unlock()
	s.repairs.assignments.Backoff(ino, now.Add(repairBackoff))
	s.noteRepairErrLocked(ino, msg)
}

func (s *Server) noteRepairErrLocked(ino uint64, msg string) {
	if msg == mdsproto.RepairInterrupted {
		s.cfg.Log.Info("repair interrupted", "ino", ino, "why", msg)
		return
	}
	if strings.Contains(msg, wire.ErrNoSpace.Error()) && len(s.repairs.noSpace) < maxNoSpaceTracked {
		s.repairs.noSpace[ino] = true
	}
	s.cfg.Log.Warn("repair failed", "ino", ino, "err", msg)
	s.repairs.errs = append(s.repairs.errs, msg)
	if len(s.repairs.errs) > maxRepairErrLog {
		s.repairs.errs = s.repairs.errs[1:]
	}
}

// activeCount is the number of assignments whose worker may still report.
func (h *repairState) activeCount(now time.Time) int {
	rebuild, scrub, balance := h.activeKinds(now)
	return rebuild + scrub + balance
}

// activeKinds counts the files being worked on by what is done to them
// (repair.Assignments.ActiveKinds).
func (h *repairState) activeKinds(now time.Time) (rebuild, scrub, balance int) {
	return h.assignments.ActiveKinds(now)
}

// rate is the repair write rate over the last rateWindow.
func (h *repairState) rate(now time.Time) float64 {
	var r float64
	h.done, r = windowRate(h.done, now)
	return r
}

// scrubRate is the scrub read rate over the last rateWindow.
func (h *repairState) scrubRate(now time.Time) float64 {
	var r float64
	h.scrubDone, r = windowRate(h.scrubDone, now)
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
