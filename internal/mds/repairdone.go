package mds

// A healer's report: what a repair or scrub did to a file, recorded in
// its inode, the heal statistics and the file events (damage.go).

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

// repairDone records a healer's result. The written components leave the
// dirty set unless a source was itself found dirty meanwhile (a writer
// reported a failed write to it): then its decoded output is suspect and
// the file is repaired again.
func (s *Server) repairDone(ctx context.Context, req mdsproto.RepairDoneReq) (struct{}, error) {
	now := s.cfg.Now()
	s.heal.mu.Lock()
	cl, _ := s.heal.claims.Get(req.Ino)
	why := claimWhy{text: cl.Why, balance: cl.Balance}
	s.heal.mu.Unlock()
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
			// by the claim; any other source that is dirty now was marked
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
	// The claim ends in the same critical section as its counters move,
	// so a status never sees it neither active nor counted.
	s.heal.mu.Lock()
	defer s.heal.mu.Unlock()
	s.heal.claims.Done(req.Ino, req.Version)
	delete(s.heal.noSpace, req.Ino) // noted again below if this attempt failed for space
	if wire.CodeOf(err) == wire.ErrNotFound {
		return struct{}{}, nil // removed meanwhile
	}
	if err != nil {
		return struct{}{}, err
	}
	s.heal.done = append(s.heal.done, doneMark{at: now, bytes: req.Bytes})
	s.heal.stats.BytesDone += req.Bytes
	if req.Read > 0 {
		s.heal.scrubDone = append(s.heal.scrubDone, doneMark{at: now, bytes: req.Read})
		s.heal.stats.ScrubBytes += req.Read
	}
	if failed == "repair lock lost" {
		req.Lost = "" // this attempt decided nothing
	}
	if e, ok := repairEvent(req, failed, why.text, path, now.UnixNano()); ok && !why.balance {
		s.noteFileEventLocked(e)
	}
	if failed == mdsproto.RepairInterrupted {
		if req.Kind == mdsproto.RepairScrub && !s.heal.scrubIn[req.Ino] {
			s.heal.scrubIn[req.Ino] = true // scrubbed later, not dropped
			s.heal.scrubQ = append(s.heal.scrubQ, req.Ino)
			s.heal.stats.ScrubTaken-- // taken again when it is claimed again
		}
		s.noteRepairErrLocked(req.Ino, failed)
		return struct{}{}, nil
	}
	if failed != "" {
		if req.Kind == mdsproto.RepairScrub {
			s.heal.stats.ScrubFailed++
		}
		s.heal.claims.Backoff(req.Ino, now.Add(repairBackoff))
		s.noteRepairErrLocked(req.Ino, failed)
		return struct{}{}, nil
	}
	if req.Kind == mdsproto.RepairScrub {
		s.heal.stats.ScrubbedFiles++
		s.heal.stats.ScrubRepaired += req.Repaired
		if len(s.heal.scrubQ) == 0 {
			s.heal.stats.LastScrubEndNs = now.UnixNano()
		}
	} else {
		if why.balance {
			s.heal.stats.BalanceBytes += req.Bytes
		} else {
			s.heal.stats.FilesDone++
		}
		delete(s.heal.noSpace, req.Ino)
		line := fmt.Sprintf("inode %d: %s (%d bytes written)", req.Ino, why.text, req.Bytes)
		s.heal.recent = append(s.heal.recent, line)
		if len(s.heal.recent) > maxRecentRepairs {
			s.heal.recent = s.heal.recent[1:]
		}
		s.cfg.Log.Info("repaired", "ino", req.Ino, "why", why.text, "bytes", req.Bytes)
	}
	return struct{}{}, nil
}

func (s *Server) noteRepairErr(ino uint64, msg string, now time.Time) {
	s.heal.mu.Lock()
	defer s.heal.mu.Unlock()
	s.heal.claims.Backoff(ino, now.Add(repairBackoff))
	s.noteRepairErrLocked(ino, msg)
}

func (s *Server) noteRepairErrLocked(ino uint64, msg string) {
	if msg == mdsproto.RepairInterrupted {
		s.cfg.Log.Info("repair interrupted", "ino", ino, "why", msg)
		return
	}
	if strings.Contains(msg, wire.ErrNoSpace.Error()) && len(s.heal.noSpace) < maxNoSpaceTracked {
		s.heal.noSpace[ino] = true
	}
	s.cfg.Log.Warn("repair failed", "ino", ino, "err", msg)
	s.heal.errs = append(s.heal.errs, msg)
	if len(s.heal.errs) > maxRepairErrLog {
		s.heal.errs = s.heal.errs[1:]
	}
}

// activeCount is the number of claims whose healer may still report.
func (h *healState) activeCount(now time.Time) int {
	rebuild, scrub, balance := h.activeKinds(now)
	return rebuild + scrub + balance
}

// activeKinds counts the files being worked on by what is done to them
// (repair.Claims.ActiveKinds).
func (h *healState) activeKinds(now time.Time) (rebuild, scrub, balance int) {
	return h.claims.ActiveKinds(now)
}

// rate is the repair write rate over the last rateWindow.
func (h *healState) rate(now time.Time) float64 {
	var r float64
	h.done, r = windowRate(h.done, now)
	return r
}

// scrubRate is the scrub read rate over the last rateWindow.
func (h *healState) scrubRate(now time.Time) float64 {
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
