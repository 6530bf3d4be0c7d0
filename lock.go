package braid

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Extent locks, the client's side (the protocol is described in
// internal/mds/extlock.go). A handle writes a stripe only while it holds
// the stripe's write lock: from before it reads the stripe for a
// read-modify-write until the stripe's units are durable on their OSDs.
// A sole writer gets the whole file with its open and never asks again;
// when another handle wants a range, the MDS recalls it through the
// client's session, and the handle flushes its writes there and gives
// the range back with its view of the size.

// maxLockTries bounds how often one write asks for its stripes again
// after a recall took them between the grant and the write.
const maxLockTries = 64

// lockSession is a client's extent-lock session: one standing LockWait
// request at the MDS renews every lock the client's handles hold and
// brings back recalls.
type lockSession struct {
	c  *Client
	id uint64

	mu         sync.Mutex
	files      map[uint64]*File // handles that hold (or held) locks, by handle
	closed     map[uint64]bool  // handles closed lately (bounded by maxClosedHandles)
	validUntil time.Time        // the MDS keeps the locks at least until then
	running    bool             // the LockWait loop is running
	// incarnation is the MDS process the locks are from; one met since
	// (the MDS restarted) gets them reclaimed before they count again.
	incarnation uint64
	reclaimMu   sync.Mutex    // one reclaim at a time
	renewed     chan struct{} // closed (and replaced) when validUntil moves
}

func newLockSession(c *Client) *lockSession {
	return &lockSession{c: c, id: mrand.Uint64() | 1, files: map[uint64]*File{}, closed: map[uint64]bool{}, renewed: make(chan struct{})}
}

// valid reports whether locks can be trusted now: the MDS keeps a
// session's locks for a lease from when it last heard from it, and the
// client counts that lease from before it sent the request.
func (s *lockSession) valid(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.validUntil)
}

// extend records that the MDS renewed the session with a request sent at
// sent, for lease.
func (s *lockSession) extend(sent time.Time, lease time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := sent.Add(lease); u.After(s.validUntil) {
		s.validUntil = u
		close(s.renewed)
		s.renewed = make(chan struct{})
	}
}

// awaitValid waits, up to timeout, for the session's locks to be valid
// again after a lapse (the MDS unreachable, or restarted and being
// reclaimed from), so a sync does not fail a stripe buffered under a lock
// the client is about to get back.
func (s *lockSession) awaitValid(ctx context.Context, timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		ok, renewed := time.Now().Before(s.validUntil), s.renewed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-renewed:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// awaitLocks is awaitValid for a handle that holds locks.
func (f *File) awaitLocks() {
	f.locks.mu.Lock()
	holds := len(f.locks.held) > 0
	f.locks.mu.Unlock()
	if holds && f.write {
		f.c.locks.awaitValid(f.c.life, f.c.opts.IOTimeout)
	}
}

// join registers f as holding locks and starts the LockWait loop.
func (s *lockSession) join(f *File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[f.handle] = f
	if !s.running {
		s.running = true
		go s.run()
	}
}

func (s *lockSession) leave(f *File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.files, f.handle)
	if len(s.closed) >= maxClosedHandles {
		clear(s.closed)
	}
	s.closed[f.handle] = true
}

// maxClosedHandles bounds the closed handles a session remembers.
const maxClosedHandles = 1024

// file is the handle a recall is for, and whether it was closed.
func (s *lockSession) file(handle uint64) (*File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[handle], s.closed[handle]
}

// run keeps a LockWait at the MDS while any handle holds locks.
func (s *lockSession) run() {
	ctx := s.c.life
	lease := defaultLockLease
	idleSince := time.Now()
	for ctx.Err() == nil {
		s.mu.Lock()
		if len(s.files) > 0 {
			idleSince = time.Now()
		} else if time.Since(idleSince) > lease {
			// Kept a lease past the last handle: a client writing file
			// after file would otherwise start a LockWait for each.
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		sent := time.Now()
		var resp mdsproto.LockWaitResp
		err := s.c.mds(ctx, mdsproto.OpLockWait, mdsproto.LockWaitReq{Session: s.id, WaitNs: int64(lease / 3)}, &resp)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond) // the locks lapse if this goes on: writers then ask again
			continue
		}
		lease = time.Duration(resp.LeaseNs)
		s.meet(ctx, resp.Incarnation)
		s.extend(sent, lease)
		for _, r := range resp.Recalls {
			go s.recall(r)
		}
	}
}

// meet notes the MDS process an answer came from. If it is not the one
// the locks are from, the MDS restarted and forgot them: every handle
// reclaims its locks, which the new process takes back only in its
// grace (it grants nothing else meanwhile). A handle whose reclaim is
// refused has lost its locks: what it buffered under them fails.
func (s *lockSession) meet(ctx context.Context, incarnation uint64) {
	s.reclaimMu.Lock()
	defer s.reclaimMu.Unlock()
	s.mu.Lock()
	old := s.incarnation
	s.incarnation = incarnation
	files := make([]*File, 0, len(s.files))
	for _, f := range s.files {
		files = append(files, f)
	}
	s.mu.Unlock()
	if old == 0 || old == incarnation {
		return
	}
	for _, f := range files {
		f.reclaim(ctx, s.id)
	}
}

// defaultLockLease is assumed until the MDS says how long locks last.
const defaultLockLease = 4 * time.Second

// recall hands a recalled range back: through the handle holding it, or
// at once if the handle was closed (its writes are durable). A recall
// for a handle not known yet (its open's answer is still on its way) is
// left: the MDS sends it again.
func (s *lockSession) recall(r mdsproto.Recall) {
	f, closed := s.file(r.Handle)
	switch {
	case f != nil:
		f.recall(r)
	case closed:
		req := mdsproto.ExtentReq{Ino: r.Ino, Handle: r.Handle, Session: s.id, Lo: r.Lo, Hi: r.Hi, Seq: r.Seq}
		_ = s.c.mds(s.c.life, mdsproto.OpExtentRelease, req, nil)
	}
}

// fileLocks is a handle's extent locks (guarded by mu).
type fileLocks struct {
	mu        sync.Mutex
	cond      *sync.Cond
	held      []stripeSpan // sorted, disjoint
	seq       uint64       // the newest grant taken into held
	asking    int          // lock requests in flight: a recall of a grant not seen yet waits for them
	recalling int          // recalls being handed back: writes wait
	using     int          // writes under held ranges in progress: recalls wait
	lost      error        // why locks were lost without being handed back (their buffered writes fail)
}

// stripeSpan is stripes [lo, hi).
type stripeSpan struct{ lo, hi int64 }

// covers reports whether held covers [lo, hi).
func covers(held []stripeSpan, lo, hi int64) bool {
	for _, h := range held {
		if h.lo <= lo && lo < h.hi {
			lo = h.hi
		}
		if lo >= hi {
			return true
		}
	}
	return lo >= hi
}

// addSpan merges s into held.
func addSpan(held []stripeSpan, s stripeSpan) []stripeSpan {
	out := make([]stripeSpan, 0, len(held)+1)
	for _, h := range held {
		if h.hi < s.lo || s.hi < h.lo {
			out = append(out, h)
			continue
		}
		s.lo, s.hi = min(s.lo, h.lo), max(s.hi, h.hi)
	}
	out = append(out, s)
	slices.SortFunc(out, func(a, b stripeSpan) int { return int(min(max(a.lo-b.lo, -1), 1)) })
	return out
}

// cutSpan removes s from held.
func cutSpan(held []stripeSpan, s stripeSpan) []stripeSpan {
	var out []stripeSpan
	for _, h := range held {
		if h.hi <= s.lo || s.hi <= h.lo {
			out = append(out, h)
			continue
		}
		if h.lo < s.lo {
			out = append(out, stripeSpan{h.lo, s.lo})
		}
		if s.hi < h.hi {
			out = append(out, stripeSpan{s.hi, h.hi})
		}
	}
	return out
}

func (f *File) initLocks() { f.locks.cond = sync.NewCond(&f.locks.mu) }

// takeGrant installs a lock the MDS granted (with the open, or asked
// for), sent at sent.
func (f *File) takeGrant(g *mdsproto.ExtentGrant, sent time.Time) {
	f.c.locks.meet(f.c.life, g.Incarnation) // before: the grant is not among what is reclaimed
	f.c.locks.extend(sent, time.Duration(g.LeaseNs))
	f.c.locks.join(f)
	f.locks.mu.Lock()
	f.locks.held = addSpan(f.locks.held, stripeSpan{g.Lo, g.Hi})
	f.locks.seq = max(f.locks.seq, g.Seq)
	f.locks.mu.Unlock()
	// Marks other writers made are read around from now on: a component
	// that missed one of their writes must not be read for a
	// read-modify-write (seed 50 of the simulation, with a disk failing
	// writes: a stale unit read as current, and parity computed from it).
	f.amu.Lock()
	for _, d := range g.Dirty {
		if !f.caughtUp[int(d)] {
			f.dirty[int(d)] = true
		}
	}
	f.amu.Unlock()
}

// takeSize adopts the size a grant handed over (under mu). A newer
// generation means another handle truncated the file: this handle's
// view is replaced. Bytes below the size may hold other writers' data,
// acknowledged or about to be: overwriting part of a stripe there goes
// through the two-phase commit.
func (f *File) takeSizeLocked(g *mdsproto.ExtentGrant) {
	switch {
	case g.SizeGen > f.sizeGen:
		f.size, f.committed, f.sizeGen = g.End, g.End, g.SizeGen
	case g.SizeGen == f.sizeGen:
		f.size, f.committed = max(f.size, g.End), max(f.committed, g.End)
	}
}

// lockStripes waits until the handle holds the write lock on stripes
// [lo, hi), asking the MDS for it if need be, and keeps it from being
// handed back until the returned func is called.
func (f *File) lockStripes(ctx context.Context, lo, hi int64) (func(), error) {
	l := &f.locks
	for try := 0; ; try++ {
		l.mu.Lock()
		for l.recalling > 0 {
			l.cond.Wait()
		}
		if !f.c.locks.valid(time.Now()) {
			l.held = nil // the lease lapsed (the MDS was unreachable): ask again
		}
		if covers(l.held, lo, hi) {
			l.using++
			l.mu.Unlock()
			return f.unpinLocks, nil
		}
		l.mu.Unlock()
		if try == maxLockTries {
			return nil, wire.Errorf(wire.ErrBusy, "%s: stripes %d-%d: recalled %d times before they could be written", f.path, lo, hi-1, try)
		}
		g, err := f.askLock(ctx, lo, hi)
		if err != nil {
			return nil, fmt.Errorf("%s: lock stripes %d-%d: %w", f.path, lo, hi-1, err)
		}
		f.mu.Lock()
		f.takeSizeLocked(g)
		f.mu.Unlock()
	}
}

// askLock asks the MDS for stripes [lo, hi) and takes the grant. While
// it asks, a recall of a grant this handle has not seen waits: it may be
// for this one.
func (f *File) askLock(ctx context.Context, lo, hi int64) (*mdsproto.ExtentGrant, error) {
	l := &f.locks
	l.mu.Lock()
	l.asking++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.asking--
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	sent := time.Now()
	var g mdsproto.ExtentGrant
	req := mdsproto.ExtentReq{Ino: f.layoutIno(), Handle: f.handle, Session: f.c.locks.id, Lo: lo, Hi: hi}
	if err := f.c.mdsWaitBusy(ctx, mdsproto.OpExtentLock, req, &g); err != nil {
		return nil, err
	}
	f.takeGrant(&g, sent)
	return &g, nil
}

// stripeHeld reports whether the handle may send stripe fs: it holds
// the stripe's lock and the lock is still valid. A stripe buffered under
// a lock lost since (the MDS unreachable past the lease, or a restart
// whose reclaim failed) must not be sent: another writer may have the
// stripe now.
func (f *File) stripeHeld(fs int64) error {
	l := &f.locks
	l.mu.Lock()
	defer l.mu.Unlock()
	if covers(l.held, fs, fs+1) && f.c.locks.valid(time.Now()) {
		return nil
	}
	if l.lost != nil {
		return l.lost
	}
	return wire.Errorf(wire.ErrUnavail, "%s: stripe %d: its extent lock lapsed before it was written (the MDS was unreachable for a lease)", f.path, fs)
}

func (f *File) unpinLocks() {
	l := &f.locks
	l.mu.Lock()
	l.using--
	l.cond.Broadcast()
	l.mu.Unlock()
}

// recall hands stripes r back: once no write is using them, the stripe
// being filled is sent if it is among them, every write is made durable
// on its OSDs (so none of this handle's writes is ever sent again over a
// later writer's), and the range goes back with the size as seen here.
func (f *File) recall(r mdsproto.Recall) {
	l := &f.locks
	l.mu.Lock()
	for r.Seq > l.seq && l.asking > 0 {
		l.cond.Wait() // the grant it recalls is on its way
	}
	l.recalling++
	for l.using > 0 {
		l.cond.Wait()
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.recalling--
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	ctx := f.c.life
	f.mu.Lock()
	if !f.closed {
		if wb := f.wb; wb != nil && wb.fs >= r.Lo && wb.fs < r.Hi {
			f.submitLocked()
		}
		f.flushOSDs(ctx) // waits for the stripes in flight; nothing to do if nothing is unsynced
	}
	req := mdsproto.ExtentReq{Ino: r.Ino, Handle: r.Handle, Session: f.c.locks.id, Lo: r.Lo, Hi: r.Hi,
		End: f.size, SizeGen: f.sizeGen}
	l.mu.Lock()
	l.held = cutSpan(l.held, stripeSpan{r.Lo, r.Hi})
	req.Seq = l.seq // what it gives back: grants it has not seen stay held
	l.mu.Unlock()
	f.mu.Unlock()
	if err := f.c.mds(ctx, mdsproto.OpExtentRelease, req, nil); err != nil && !errors.Is(err, context.Canceled) {
		// The MDS asks again while the range is wanted.
		return
	}
}

// reclaim asks a restarted MDS to take back the locks this handle holds.
func (f *File) reclaim(ctx context.Context, session uint64) {
	l := &f.locks
	l.mu.Lock()
	l.recalling++ // no write starts under locks being reclaimed
	for l.using > 0 {
		l.cond.Wait()
	}
	spans := make([][2]int64, 0, len(l.held))
	for _, h := range l.held {
		spans = append(spans, [2]int64{h.lo, h.hi})
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.recalling--
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	if len(spans) == 0 {
		return
	}
	f.mu.Lock()
	req := mdsproto.ReclaimReq{Ino: f.layoutIno(), Handle: f.handle, Session: session, Spans: spans, End: f.size, SizeGen: f.sizeGen}
	f.mu.Unlock()
	var g mdsproto.ExtentGrant
	err := f.c.mds(ctx, mdsproto.OpExtentReclaim, req, &g)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.held, l.lost = nil, fmt.Errorf("%s: extent locks lost across an MDS restart: %w", f.path, err)
		return
	}
	l.seq = g.Seq // the new process numbers its grants afresh
}

// releaseLocks gives back every lock the handle holds (its lease is
// left to run out, which would otherwise keep them).
func (f *File) releaseLocks(ctx context.Context) {
	f.c.locks.leave(f)
	f.locks.mu.Lock()
	had, seq := len(f.locks.held) > 0, f.locks.seq
	f.locks.held = nil
	f.locks.mu.Unlock()
	if had {
		req := mdsproto.ExtentReq{Ino: f.layoutIno(), Handle: f.handle, Session: f.c.locks.id, Lo: 0, Hi: mdsproto.MaxStripe,
			End: f.size, SizeGen: f.sizeGen, Seq: seq}
		_ = f.c.mds(ctx, mdsproto.OpExtentRelease, req, nil)
	}
}

// stripesOf is the stripes bytes [off, off+n) touch.
func stripesOf(off, n, stripeBytes int64) (int64, int64) {
	return off / stripeBytes, (off+max(n, 1)-1)/stripeBytes + 1
}
