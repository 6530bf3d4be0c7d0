package mds

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Extent locks: concurrent writers of one file, coordinated per stripe
// range (Lustre's extent locks; Panasas and Sigma serialise parity
// updates per stripe). A writer holds the write lock on a stripe from
// before it reads the stripe for a read-modify-write until the stripe's
// units are durable on their OSDs; two writers of one stripe would
// otherwise each write back the other's bytes as they read them, and
// parity would match the wrong data.
//
// Locks are cached by the client (a sole writer takes the whole file at
// open and never asks again) and recalled when another handle wants an
// overlapping range: the MDS queues a recall for the holder's session,
// which its standing LockWait request carries back; the holder makes its
// writes in the range durable, hands over its view of the file's size,
// and releases exactly the range asked for. Writers of different stripes
// never wait for each other.
//
// Locks live in MDS memory and are leases: a session's LockWait renews
// them all, and a session silent for the lease loses them (its client
// stops trusting them at the same lease counted from when it sent the
// request, so the two agree without comparing clocks). After a restart
// the MDS grants nothing for one lease if locks may have been held (a
// mark in the store says so): old holders have stopped by then.
//
// extentTable decides; the handlers in extlock_ops.go do the waiting.

// Bounds on what the lock table holds.
const (
	maxExtentLocks    = 1 << 20 // granted ranges over all files
	maxLockFiles      = 1 << 18 // files with locks or a size handed over
	maxLockSessions   = 1 << 16 // client sessions holding locks or waiting
	maxQueuedRecalls  = 1 << 12 // per session
	defaultLockLease  = 4 * time.Second
	lockWaitMaxNs     = int64(30 * time.Second)
	lockAcquireWindow = time.Second // an OpExtentLock waits this long for holders before ErrBusy
)

// span is a range of stripes [lo, hi).
type span struct{ lo, hi int64 }

func (a span) overlaps(b span) bool { return a.lo < b.hi && b.lo < a.hi }

// extentLock is one granted range.
type extentLock struct {
	session, handle uint64
	span
	seq uint64 // the newest grant merged into it
	// recalled is the part a recall was sent for, at recalledAt: asked
	// for again, it is not sent again for a while (the holder is
	// flushing), only if the answer may have been lost.
	recalled   span
	recalledAt time.Time
}

// fileLocks is the lock state of one file.
type fileLocks struct {
	locks    []extentLock
	released chan struct{} // closed (and replaced) when a lock on the file goes: its waiters try again
	// end is the largest size holders handed over at release, of size
	// generation endGen; the next grant passes it on, so a writer never
	// fills a stripe from a size view that misses another's writes.
	end    int64
	endGen uint64
}

type lockSession struct {
	// epoch numbers the session's life at this MDS: a session that lost
	// its locks (silent past the lease) starts again with a new one, and
	// its client, seeing it change, knows its locks are gone.
	epoch   uint64
	seen    time.Time // the last LockWait (or grant) from the session
	recalls []mdsproto.Recall
	// moved are files whose locks this process dropped with their slot
	// (dropInos): told at once, and again in every answer for a lease,
	// so an answer lost on the way is not the client's only notice.
	moved []movedFile
	wake  chan struct{} // closed when a recall or a move is queued for a waiting LockWait
}

// extentTable holds every file's extent locks.
type extentTable struct {
	mu       sync.Mutex
	lease    time.Duration
	graceEnd time.Time // no grants before (locks of a previous process may still be used)
	// slotGraceEnd holds grants back in the slots this process gained
	// from another (several active), each until its own grace ends: the
	// files of the slots it kept go on at once. At most route.SlotCount entries.
	slotGraceEnd map[uint32]time.Time
	files        map[uint64]*fileLocks
	sessions     map[uint64]*lockSession
	n            int       // locks over all files
	seq          uint64    // grants made so far
	epochs       uint64    // sessions started so far
	idleAt       time.Time // when the table last became empty
	lastExpiry   time.Time // expiry runs at most every lease/8
}

func newExtentTable(lease time.Duration, now time.Time) *extentTable {
	return &extentTable{lease: lease, files: map[uint64]*fileLocks{}, sessions: map[uint64]*lockSession{}, idleAt: now}
}

// grace holds every grant back until now+lease.
func (t *extentTable) grace(now time.Time, extra time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.graceEnd = now.Add(t.lease + extra)
}

// graceSlots holds grants in slots back until now+lease+extra: they were
// another process's, whose clients may still use locks it granted and
// reclaim them here meanwhile.
func (t *extentTable) graceSlots(now time.Time, slots []uint32, extra time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.slotGraceEnd == nil {
		t.slotGraceEnd = map[uint32]time.Time{}
	}
	maps.DeleteFunc(t.slotGraceEnd, func(_ uint32, end time.Time) bool { return !now.Before(end) })
	end := now.Add(t.lease + extra)
	for _, slot := range slots {
		if end.After(t.slotGraceEnd[slot]) {
			t.slotGraceEnd[slot] = end
		}
	}
}

// graceEndLocked is when grants of ino may start: after the grace of a
// start, and of its slot's gain (t.mu held).
func (t *extentTable) graceEndLocked(ino uint64) time.Time {
	end := t.graceEnd
	if e, ok := t.slotGraceEnd[route.SlotOf(ino)]; ok && e.After(end) {
		end = e
	}
	return end
}

// acquireResult is acquire's decision.
type acquireResult struct {
	granted bool
	grant   span
	seq     uint64
	epoch   uint64 // of the session
	end     int64  // size handed over by earlier holders (of endGen)
	endGen  uint64
	wait    <-chan struct{} // not granted: closed when a lock is released
	until   time.Time       // not granted: or try again then (the grace after a start)
	full    bool            // not granted: the table is full
}

// acquire grants handle of session the write lock on want, if no other
// handle holds part of it; otherwise, with recall, it queues recalls to
// the holders, and says what to wait on. whole widens an uncontended
// grant to the whole file.
func (t *extentTable) acquire(now time.Time, ino, session, handle uint64, want span, whole, recall bool) acquireResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	if end := t.graceEndLocked(ino); now.Before(end) {
		return acquireResult{until: end}
	}
	t.expireLocked(now, false)
	s := t.sessionLocked(session, now)
	if s == nil {
		return acquireResult{full: true, until: now.Add(t.lease / 4)}
	}
	s.forgetMoved(ino) // its slot came back: what it holds here is current
	fl := t.fileLocked(ino)
	conflict := false
	others := false
	for i := range fl.locks {
		l := &fl.locks[i]
		if l.handle == handle {
			continue
		}
		others = true
		if l.overlaps(want) {
			conflict = true
			if !recall {
				continue
			}
			r := span{max(l.lo, want.lo), min(l.hi, want.hi)}
			if l.recalled.lo <= r.lo && r.hi <= l.recalled.hi && now.Sub(l.recalledAt) < t.lease/2 {
				continue // sent already; the holder is on it
			}
			l.recalled, l.recalledAt = r, now
			t.recallLocked(l.session, mdsproto.Recall{Ino: ino, Handle: l.handle, Lo: r.lo, Hi: r.hi, Seq: l.seq})
		}
	}
	if conflict {
		return acquireResult{wait: fl.released}
	}
	if whole && !others {
		want = span{0, mdsproto.MaxStripe}
	}
	if t.n >= maxExtentLocks {
		t.expireLocked(now, true)
		if t.n >= maxExtentLocks {
			return acquireResult{full: true, until: now.Add(t.lease / 4)}
		}
	}
	t.seq++
	t.addLocked(fl, extentLock{session: session, handle: handle, span: want, seq: t.seq})
	return acquireResult{granted: true, grant: want, seq: t.seq, epoch: s.epoch, end: fl.end, endGen: fl.endGen}
}

// fileLocked returns ino's entry, made if need be.
func (t *extentTable) fileLocked(ino uint64) *fileLocks {
	fl := t.files[ino]
	if fl == nil {
		if len(t.files) >= maxLockFiles {
			t.evictLocked()
		}
		fl = &fileLocks{released: make(chan struct{})}
		t.files[ino] = fl
	}
	return fl
}

// reclaim takes back locks a handle held from the previous MDS process,
// during the grace (when nothing else can have been granted), with its
// view of the size. It returns the seq the locks now have.
func (t *extentTable) reclaim(now time.Time, ino, session, handle uint64, spans []span, end int64, gen uint64) (seq, epoch uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !now.Before(t.graceEndLocked(ino)) {
		return 0, 0, wire.Errorf(wire.ErrInvalid, "extent locks can be reclaimed only in the first %v after an MDS start or a file's move to it", t.lease)
	}
	s := t.sessionLocked(session, now)
	if s == nil || t.n+len(spans) > maxExtentLocks {
		return 0, 0, wire.Errorf(wire.ErrBusy, "the MDS holds as many extent locks as it may")
	}
	s.forgetMoved(ino)
	fl := t.fileLocked(ino)
	for _, want := range spans {
		for _, l := range fl.locks {
			if l.handle != handle && l.overlaps(want) {
				// Two holders of one range: one of them was never
				// granted it (a bug, or a clock far off). Neither gets
				// it back from here.
				return 0, 0, wire.Errorf(wire.ErrInvalid, "inode %d stripes %s reclaimed by two handles", ino, want)
			}
		}
	}
	switch {
	case gen > fl.endGen:
		fl.end, fl.endGen = end, gen
	case gen == fl.endGen:
		fl.end = max(fl.end, end)
	}
	t.seq++
	for _, sp := range spans {
		t.addLocked(fl, extentLock{session: session, handle: handle, span: sp, seq: t.seq})
	}
	return t.seq, s.epoch, nil
}

func (a span) String() string { return fmt.Sprintf("[%d, %d)", a.lo, a.hi) }

// addLocked records l, merged with the handle's ranges it touches.
func (t *extentTable) addLocked(fl *fileLocks, l extentLock) {
	kept := fl.locks[:0]
	for _, o := range fl.locks {
		if o.handle == l.handle && o.lo <= l.hi && l.lo <= o.hi {
			l.lo, l.hi, l.seq = min(l.lo, o.lo), max(l.hi, o.hi), max(l.seq, o.seq)
			t.n--
			continue
		}
		kept = append(kept, o)
	}
	fl.locks = append(kept, l)
	t.n++
}

// recallLocked queues r for session, once.
func (t *extentTable) recallLocked(session uint64, r mdsproto.Recall) {
	s := t.sessions[session]
	if s == nil || slices.Contains(s.recalls, r) {
		return
	}
	if len(s.recalls) >= maxQueuedRecalls {
		// The session is not taking its recalls: it will lose its locks
		// to the lease; the acquirer waits for that.
		return
	}
	s.recalls = append(s.recalls, r)
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

func (t *extentTable) sessionLocked(id uint64, now time.Time) *lockSession {
	s := t.sessions[id]
	if s == nil {
		if len(t.sessions) >= maxLockSessions {
			return nil
		}
		t.epochs++
		s = &lockSession{epoch: t.epochs}
		t.sessions[id] = s
	}
	s.seen = now
	return s
}

// release gives back stripes r of handle's locks granted by grant seq
// or before, with the holder's view of the size (end, of generation gen).
func (t *extentTable) release(ino, handle uint64, r span, seq uint64, end int64, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fl := t.files[ino]
	if fl == nil {
		return
	}
	switch {
	case gen > fl.endGen:
		fl.end, fl.endGen = end, gen
	case gen == fl.endGen:
		fl.end = max(fl.end, end)
	}
	var out []extentLock
	for _, l := range fl.locks {
		if l.handle != handle || !l.overlaps(r) || l.seq > seq {
			// A lock granted after what the holder gives back (the answer
			// to its grant had not reached it yet) stays.
			out = append(out, l)
			continue
		}
		t.n--
		if l.lo < r.lo {
			left := l
			left.hi = r.lo
			out = append(out, left)
			t.n++
		}
		if r.hi < l.hi {
			right := l
			right.lo = r.hi
			out = append(out, right)
			t.n++
		}
	}
	fl.locks = out
	t.releasedLocked(ino, fl)
}

// dropHandle releases every lock of handle on ino (its file closed, or
// its writer's lease ran out).
func (t *extentTable) dropHandle(ino, handle uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fl := t.files[ino]
	if fl == nil {
		return
	}
	fl.locks = slices.DeleteFunc(fl.locks, func(l extentLock) bool {
		if l.handle == handle {
			t.n--
			return true
		}
		return false
	})
	t.releasedLocked(ino, fl)
}

// truncated starts size generation gen for ino: what holders handed over
// before no longer counts.
func (t *extentTable) truncated(ino uint64, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fl := t.files[ino]; fl != nil && gen > fl.endGen {
		fl.end, fl.endGen = 0, gen
		t.forgetLocked(ino, fl)
	}
}

func (t *extentTable) releasedLocked(ino uint64, fl *fileLocks) {
	t.forgetLocked(ino, fl)
	close(fl.released)
	fl.released = make(chan struct{})
}

// forgetLocked drops a file's entry once it holds nothing: no lock, and
// no size handed over that a commit has not recorded yet (the next
// holder must get it even if the last lock went with it).
func (t *extentTable) forgetLocked(ino uint64, fl *fileLocks) {
	if len(fl.locks) == 0 && fl.end == 0 {
		delete(t.files, ino)
	}
}

// committed notes a commit of size (generation gen): a size handed over
// that it covers is recorded, and need not be kept.
func (t *extentTable) committed(ino uint64, size int64, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fl := t.files[ino]; fl != nil && gen == fl.endGen && size >= fl.end {
		fl.end = 0
		t.forgetLocked(ino, fl)
	}
}

// evictLocked makes room by forgetting sizes handed over for files no
// one holds a lock on (their writers have not committed for long: a
// writer that died left them, and its writes were never acknowledged).
func (t *extentTable) evictLocked() {
	for ino, fl := range t.files {
		if len(fl.locks) == 0 {
			delete(t.files, ino)
		}
		if len(t.files) < maxLockFiles*3/4 {
			return
		}
	}
}

// expireLocked drops sessions silent for a lease, with their locks; a
// session heard from again starts a new epoch. It runs at most every
// lease/8 unless forced: it walks every session and lock.
func (t *extentTable) expireLocked(now time.Time, force bool) {
	if !force && now.Sub(t.lastExpiry) < t.lease/8 {
		return
	}
	t.lastExpiry = now
	dead := map[uint64]bool{}
	for id, s := range t.sessions {
		if now.Sub(s.seen) > t.lease {
			dead[id] = true
			delete(t.sessions, id)
		}
	}
	t.dropSessionsLocked(dead)
}

// dropInos drops the locks on every inode gone says is no longer this
// process's (its slot moved), and tells their sessions which files at
// their next LockWait (woken now): those clients reclaim the files'
// locks at the new owner in its grace, and keep their locks of the files
// still served here. Past the new owner's grace, what was not reclaimed
// goes to others. A session with more than maxMovedPerSession files moved
// within a lease is dropped whole instead (its client finds a new epoch).
func (t *extentTable) dropInos(now time.Time, gone func(ino uint64) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dead := map[uint64]bool{}
	for ino, fl := range t.files {
		if !gone(ino) {
			continue
		}
		for _, l := range fl.locks {
			if s := t.sessions[l.session]; s != nil && !dead[l.session] && !s.tellMoved(ino, now, t.lease) {
				dead[l.session] = true
			}
		}
		t.n -= len(fl.locks)
		fl.locks = nil
		t.releasedLocked(ino, fl)
	}
	for id := range dead {
		if s := t.sessions[id]; s != nil && s.wake != nil {
			close(s.wake)
			s.wake = nil
		}
		delete(t.sessions, id)
	}
	t.dropSessionsLocked(dead)
}

// maxMovedPerSession bounds the moved files a session is told of at once.
const maxMovedPerSession = 4096

// movedFile is a file whose locks the session lost with its slot.
type movedFile struct {
	ino  uint64
	at   time.Time // when they were dropped
	told bool      // in an answer already
}

// tellMoved queues ino as moved for the session's next LockWait and wakes
// a waiting one; false if the session has too many queued within a lease.
func (s *lockSession) tellMoved(ino uint64, now time.Time, lease time.Duration) bool {
	s.forgetMoved(ino) // moved again: told again
	if len(s.moved) >= maxMovedPerSession {
		s.moved = slices.DeleteFunc(s.moved, func(m movedFile) bool { return now.Sub(m.at) > lease })
	}
	if len(s.moved) >= maxMovedPerSession {
		return false
	}
	s.moved = append(s.moved, movedFile{ino: ino, at: now})
	if s.wake != nil {
		close(s.wake) // its waiting LockWait answers now
		s.wake = nil
	}
	return true
}

// dropSessionsLocked removes the locks of the sessions dead.
func (t *extentTable) dropSessionsLocked(dead map[uint64]bool) {
	if len(dead) == 0 {
		return
	}
	for ino, fl := range t.files {
		before := len(fl.locks)
		fl.locks = slices.DeleteFunc(fl.locks, func(l extentLock) bool { return dead[l.session] })
		if len(fl.locks) != before {
			t.n -= before - len(fl.locks)
			t.releasedLocked(ino, fl)
		}
	}
}

// waitAnswer is what a LockWait answers: the session's queued recalls,
// the files moved away (dropInos), and its epoch.
type waitAnswer struct {
	recalls []mdsproto.Recall
	moved   []uint64
	epoch   uint64
}

// take hands s's queued recalls and moved files to an answer; moved
// files are named again until a lease has passed since they moved.
func (s *lockSession) take(now time.Time, lease time.Duration) waitAnswer {
	a := waitAnswer{recalls: s.recalls, epoch: s.epoch}
	s.recalls = nil
	s.moved = slices.DeleteFunc(s.moved, func(m movedFile) bool { return now.Sub(m.at) > lease })
	for i := range s.moved {
		a.moved = append(a.moved, s.moved[i].ino)
		s.moved[i].told = true
	}
	return a
}

// forgetMoved stops naming ino as moved: the session took a lock on it
// here again (its slot came back), which a late notice must not undo.
func (s *lockSession) forgetMoved(ino uint64) {
	s.moved = slices.DeleteFunc(s.moved, func(m movedFile) bool { return m.ino == ino })
}

// untold reports whether a moved file has not been named in an answer.
func (s *lockSession) untold() bool {
	return slices.ContainsFunc(s.moved, func(m movedFile) bool { return !m.told })
}

// wait renews session's locks and returns its queued recalls and moves,
// or, if there are none, a channel closed when one is queued.
func (t *extentTable) wait(now time.Time, session uint64) (waitAnswer, <-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now, false)
	s := t.sessionLocked(session, now)
	if s == nil {
		return waitAnswer{}, nil, wire.Errorf(wire.ErrBusy, "%d lock sessions", len(t.sessions))
	}
	if len(s.recalls) > 0 || s.untold() {
		return s.take(now, t.lease), nil, nil
	}
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	return waitAnswer{epoch: s.epoch}, s.wake, nil
}

// waited ends a LockWait that returned nothing: the session counts as
// seen now. Its answer's epoch is a new one if the session was dropped
// meanwhile, which tells the client its locks are gone.
func (t *extentTable) waited(now time.Time, session uint64) waitAnswer {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessionLocked(session, now)
	if s == nil {
		return waitAnswer{}
	}
	s.wake = nil
	return s.take(now, t.lease)
}

// empty reports whether no lock is held, and since when.
func (t *extentTable) empty(now time.Time) (bool, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now, false)
	if t.n > 0 {
		t.idleAt = now
		return false, now
	}
	return true, t.idleAt
}

// held lists the locks on ino, for tests and status.
func (t *extentTable) held(ino uint64) []extentLock {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fl := t.files[ino]; fl != nil {
		return slices.Clone(fl.locks)
	}
	return nil
}
