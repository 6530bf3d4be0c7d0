package mds

import (
	"sync"
	"time"
)

// A repair lock (repairLock) expires so that a dead healer's file is
// claimed again; its expiry is stamped by the leader that claimed it, on
// its clock. With one MDS process that clock is the only one. With
// several sharing the engine (or a standby taking over) another process
// judges the lock, and comparing the stamp with its own clock would
// compare two machines' clocks: one running ahead would take a live
// repair for dead and let writers and a second repair in under it.
// Instead each process counts a lock's lease on its own clock from when
// it first saw the lock: never shorter than the lease left, longer by
// however old the lock was when first seen (a process that started or
// took the lead since sees its locks anew), so a dead healer's file may
// wait past its lease for a claim: repair is late, never unsafe.

// repairSights remembers when this process first saw each repair lock.
type repairSights struct {
	mu    sync.Mutex
	first map[repairLockID]time.Time
}

// repairLockID names one claim: its file and its stamp, unique per claim.
type repairLockID struct {
	ino   uint64
	until int64
}

// maxRepairSights bounds the locks remembered: claims are bounded by the
// healers at work, and a lock seen a lease ago is forgotten.
const maxRepairSights = 1 << 16

// active reports whether the lock l on ino still holds at now, counted
// from this process's first sight of it.
func (r *repairSights) active(ino uint64, l *repairLock, now time.Time) bool {
	if l == nil {
		return false
	}
	id := repairLockID{ino: ino, until: l.UntilNs}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first == nil {
		r.first = map[repairLockID]time.Time{}
	}
	first, ok := r.first[id]
	if !ok {
		if len(r.first) >= maxRepairSights {
			r.pruneLocked(now)
		}
		if len(r.first) >= maxRepairSights {
			return true // too many live claims to count: held, the safe side
		}
		first = now
		r.first[id] = now
	}
	return now.Before(first.Add(repairLease))
}

// pruneLocked forgets the locks whose lease, counted here, has passed.
func (r *repairSights) pruneLocked(now time.Time) {
	for id, first := range r.first {
		if !now.Before(first.Add(repairLease)) {
			delete(r.first, id)
		}
	}
}

// repairActive reports whether the repair lock l on ino holds at now: by
// its stamp on the one MDS process's own store, else counted on this
// process's clock (repairSights).
func (s *Server) repairActive(ino uint64, l *repairLock, now time.Time) bool {
	if s.cfg.LeadUntil == nil {
		return l.active(now)
	}
	return s.repairSights.active(ino, l, now)
}
