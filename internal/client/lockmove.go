package client

// Extent locks with several active MDS processes: when a file's slot
// moves to another process (the process died, or gave slots to one that
// joined), the handle's locks move with it, reclaimed at the new owner in
// its grace as after a restart.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
)

// moveOff, for a session with one of several active MDS processes whose
// requests fail or whose locks it dropped, asks for the routing table
// again and has each handle whose file's slot moved to another process
// reclaim its locks there (the new owner takes them back in its grace,
// as a restarted MDS does). It reports the handles it moved.
func (s *lockSession) moveOff(ctx context.Context, prefer string) map[*File]bool {
	moved := map[*File]bool{}
	if s.addr == "" {
		return moved
	}
	s.mu.Lock()
	if time.Since(s.movedAt) < minMoveCheck {
		s.mu.Unlock()
		return moved
	}
	s.movedAt = time.Now()
	files := make([]*File, 0, len(s.files))
	for _, f := range s.files {
		files = append(files, f)
	}
	s.mu.Unlock()
	return s.moveFiles(ctx, prefer, files)
}

// moveFiles asks for the routing table again (from prefer first) and has
// each of files whose slot moved to another process reclaim its locks
// there. It reports the handles it moved.
func (s *lockSession) moveFiles(ctx context.Context, prefer string, files []*File) map[*File]bool {
	moved := map[*File]bool{}
	s.c.refreshRoutesFrom(ctx, prefer)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, f := range files {
		to := s.c.ownerOf(f.layoutIno())
		if to == s.addr {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f.moveLocks(ctx, s, to) {
				mu.Lock()
				moved[f] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return moved
}

// capMoved finds the session's handles of the files the process gave up
// with their slots (LockWait's Moved, named again for a lease, so some
// may have moved on already) and caps their locks in this session at its
// lease as it stands, before the answer renews it: the process no longer
// keeps them, and the new owner grants them to others only after its
// grace, which outlasts that lease.
func (s *lockSession) capMoved(inos []uint64) []*File {
	if len(inos) == 0 {
		return nil
	}
	s.mu.Lock()
	capAt := s.validUntil
	var named []*File
	for _, f := range s.files {
		if slices.Contains(inos, f.layoutIno()) {
			named = append(named, f)
		}
	}
	s.mu.Unlock()
	var out []*File
	for _, f := range named {
		l := &f.locks
		l.mu.Lock()
		if l.sess.Load() == s { // not moved on meanwhile
			if l.capSess != s || capAt.Before(l.validCap) {
				l.capSess, l.validCap = s, capAt
			}
			out = append(out, f)
		}
		l.mu.Unlock()
	}
	return out
}

// movedAway moves the locks of handles capMoved found to their file's new
// owner. One that could not be moved, still in this session, loses its
// locks: the process dropped them.
func (s *lockSession) movedAway(ctx context.Context, files []*File) {
	moved := s.moveFiles(ctx, s.addr, files)
	for _, f := range files {
		if !moved[f] && f.locks.sess.Load() == s {
			f.loseLocks(fmt.Errorf("%s: extent locks lost: the file moved to another MDS process, and this client could not find it there", f.path))
		}
	}
}

// minMoveCheck spaces a failing session's looks for moved files.
const minMoveCheck = 500 * time.Millisecond

// moveLocks reclaims the handle's locks, held in session from, at the
// process at to, which serves the file now, and moves them into its
// session there. It reports whether it did; a refusal loses them.
func (f *File) moveLocks(ctx context.Context, from *lockSession, to string) bool {
	l := &f.locks
	req, ok := f.reclaimReq(f.c.locks.id)
	if !ok {
		// Nothing held: nothing to move, and the cap capMoved set has
		// nothing to bind (it would bind a later grant from the same
		// process, the slot back with it).
		l.mu.Lock()
		if len(l.held) == 0 && l.sess.Load() == from {
			l.capSess = nil
		}
		l.mu.Unlock()
		from.leave(f)
		return true
	}
	sent := time.Now()
	var g mdsproto.ExtentGrant
	// Routed by the file (ErrMoved from a process that has not read the
	// new table yet is asked again), not pinned to to.
	if err := f.c.mds(ctx, mdsproto.OpExtentReclaim, req, &g); err != nil {
		if f.locks.sess.Load() != from {
			return true // moved meanwhile (another move): this reclaim was its second
		}
		f.loseLocks(fmt.Errorf("%s: extent locks lost: the file moved to another MDS process, which did not take them back: %w", f.path, err))
		return false
	}
	ls := f.c.lockSessionAt(g.Server)
	defer f.c.releaseLockSession(ls)
	if _, moved, _ := f.enterSession(from, ls); !moved {
		return f.locks.sess.Load() == ls // moved there meanwhile (another move, or a grant)
	}
	from.leave(f)
	ls.meet(ctx, g.Incarnation, g.SessionEpoch)
	ls.extend(sent, time.Duration(g.LeaseNs))
	ls.join(f)
	if f.locks.left.Load() {
		ls.leave(f) // closed while it moved
	}
	l.mu.Lock()
	l.seq = g.Seq // the new process numbers its grants afresh
	l.mu.Unlock()
	return true
}

// enterSession makes ls the session of the handle's locks, if they are
// in from (nil: in whichever), the one place they change session. It
// reports the session they were in, whether they moved, and whether the
// handle held locks as they did. A cap set during a stay in some session
// (capMoved) ends with that stay: the locks are that process's again
// only if it took them back (A -> B -> A; seed 86 of the three-process
// simulation, where a stale cap made locks back at A count as lapsed).
// A sync or close waiting for the locks (awaitLocks) looks again.
func (f *File) enterSession(from, ls *lockSession) (old *lockSession, moved, held bool) {
	l := &f.locks
	l.mu.Lock() // with capMoved, which caps only the session they are in
	old = l.sess.Load()
	if moved = old != ls && (from == nil || old == from); moved {
		l.sess.Store(ls)
		l.capSess = nil
		held = len(l.held) > 0
	}
	l.mu.Unlock()
	if moved && old != nil {
		old.wake()
	}
	return old, moved, held
}
