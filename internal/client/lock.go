package client

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
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
	c    *Client
	id   uint64
	addr string // the MDS process it is with ("" : whichever serves)

	mu         sync.Mutex
	files      map[uint64]*File // handles that hold (or held) locks, by handle
	closed     map[uint64]bool  // handles closed lately (bounded by maxClosedHandles)
	validUntil time.Time        // the MDS keeps the locks at least until then
	running    bool             // the LockWait loop is running
	// incarnation is the MDS process the locks are from; one met since
	// (the MDS restarted) gets them reclaimed before they count again.
	incarnation uint64
	// epoch is the session's life at that process: a newer one means the
	// MDS dropped the session's locks (silent past the lease).
	epoch     uint64
	movedAt   time.Time     // when moveOff last looked for moved files
	pins      int           // handed out by lockSessionAt, not yet released: kept from pruning (under Client.lockSessMu)
	reclaimMu sync.Mutex    // one reclaim at a time
	renewed   chan struct{} // closed (and replaced) when validUntil moves
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
		s.wakeLocked()
	}
}

// wakeLocked wakes the handles waiting for the session's locks to count
// again (s.mu held): it was renewed, or a handle's locks left it.
func (s *lockSession) wakeLocked() {
	close(s.renewed)
	s.renewed = make(chan struct{})
}

func (s *lockSession) wake() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakeLocked()
}

// changed is closed when the session is renewed or a handle's locks
// leave it for another.
func (s *lockSession) changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

// locksValidLocked reports whether the handle's locks count now: its
// session's lease holds, and the cap of a move under way has not passed
// (f.locks.mu held).
func (f *File) locksValidLocked(now time.Time) bool {
	ls := f.lockSession()
	return ls.valid(now) && (f.locks.capSess != ls || now.Before(f.locks.validCap))
}

// awaitLocks waits, up to the I/O timeout, for a writing handle's locks
// to count again after a lapse (the MDS unreachable, restarted and being
// reclaimed from, or the file's slot moving to another process), so a
// sync or close does not fail a stripe buffered under a lock the client
// is about to get back. Locks lost return at once: their writes fail.
func (f *File) awaitLocks() {
	if !f.write {
		return
	}
	t := time.NewTimer(f.c.opts.IOTimeout)
	defer t.Stop()
	for {
		ls := f.lockSession()
		wake := ls.changed() // before looking: a change after the look wakes the wait
		l := &f.locks
		l.mu.Lock()
		if f.lockSession() != ls {
			// Moved between the two reads: wake may be the old session's
			// new channel, which nothing closes again.
			l.mu.Unlock()
			continue
		}
		done := len(l.held) == 0 || l.lost != nil || f.locksValidLocked(time.Now())
		l.mu.Unlock()
		if done {
			return
		}
		select {
		case <-wake:
		case <-t.C:
			return
		case <-f.c.life.Done():
			return
		}
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
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if s.addr != "" {
			// With one of several processes: one that is gone fails the
			// wait within a lease, so the files it served move on.
			wctx, cancel = context.WithTimeout(toMDS(ctx, s.addr), lease)
		}
		err := s.c.mds(wctx, mdsproto.OpLockWait, mdsproto.LockWaitReq{Session: s.id, WaitNs: int64(lease / 3)}, &resp)
		cancel()
		if err != nil {
			s.moveOff(ctx, "")               // the process is gone or moved its slots: its files' locks go to their new owners
			Pause(ctx, 100*time.Millisecond) // the locks lapse if this goes on: writers then ask again
			continue
		}
		lease = time.Duration(resp.LeaseNs)
		if !s.meet(ctx, resp.Incarnation, resp.SessionEpoch) {
			continue // a late answer from a process since replaced
		}
		if moving := s.capMoved(resp.Moved); len(moving) > 0 {
			go s.movedAway(ctx, moving) // not holding up the renewals of the files that stay
		}
		s.extend(sent, lease)
		for _, r := range resp.Recalls {
			go s.recall(r)
		}
	}
}

// meet notes the MDS process and session epoch an answer came from, and
// reports whether the answer is current (not from a process since
// replaced). A newer process (the MDS restarted) forgot the locks: every
// handle reclaims its own, which the new process takes back only in its
// grace (it grants nothing else meanwhile). A newer epoch under the same
// process means the MDS dropped the session (silent past its lease) and
// granted its locks away perhaps: they are lost. A handle that loses its
// locks fails what it had not made durable under them.
func (s *lockSession) meet(ctx context.Context, incarnation, epoch uint64) bool {
	s.reclaimMu.Lock()
	unlock := sync.OnceFunc(s.reclaimMu.Unlock)
	defer unlock()
	s.mu.Lock()
	oldInc, oldEpoch := s.incarnation, s.epoch
	switch {
	case incarnation < oldInc || (incarnation == oldInc && epoch < oldEpoch):
		s.mu.Unlock()
		return false
	case incarnation == oldInc && epoch == oldEpoch:
		s.mu.Unlock()
		return true
	}
	s.incarnation, s.epoch = incarnation, epoch
	files := make([]*File, 0, len(s.files))
	for _, f := range s.files {
		files = append(files, f)
	}
	s.mu.Unlock()
	if oldInc == 0 {
		return true // the first answer
	}
	moved := map[*File]bool{}
	if s.addr != "" {
		// One of several processes dropped the session (silent past its
		// lease) or started again (its slots may have gone to others
		// meanwhile, and not all come back). Locks of files now another's
		// are reclaimed there and move to its session, after the table
		// that process acted on; the rest are lost, or reclaimed here.
		// (Seed 146 of the three-MDS simulation: after a restart, a
		// reclaim routed by the file took the locks to the slot's new
		// owner while the handle stayed in this session, and when this
		// process died again, moving them there was refused as too late.)
		// Not under reclaimMu: moving meets other sessions, and sessions
		// have no order among them.
		unlock()
		s.mu.Lock()
		s.movedAt = time.Time{}
		s.mu.Unlock()
		moved = s.moveOff(ctx, s.addr)
	}
	var wg sync.WaitGroup
	for _, f := range files {
		if moved[f] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if incarnation > oldInc {
				f.reclaim(ctx, s)
			} else {
				f.loseLocks(fmt.Errorf("%s: extent locks lost: the MDS heard nothing from this client for a lease and may have granted them to another writer", f.path))
			}
		}()
	}
	wg.Wait()
	return true
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
		// Sent as a notice: a client closing meanwhile delivers it first.
		s.c.notify(mdsproto.OpExtentRelease, mdsproto.ExtentReq{Ino: r.Ino, Handle: r.Handle, Session: s.id, Lo: r.Lo, Hi: r.Hi, Seq: r.Seq})
	}
}

// fileLocks is a handle's extent locks (guarded by mu).
type fileLocks struct {
	mu        sync.Mutex
	sess      atomic.Pointer[lockSession] // the session they are held in (nil: none yet)
	left      atomic.Bool                 // the handle left its session for good (closed)
	cond      *sync.Cond
	held      []stripeSpan // sorted, disjoint
	seq       uint64       // the newest grant taken into held
	asking    int          // lock requests in flight: a recall of a grant not seen yet waits for them
	recalling int          // recalls being handed back: writes wait
	using     int          // writes under held ranges in progress: recalls wait
	lost      error        // why locks were lost without being handed back (their buffered writes fail)
	// validCap is when the locks stop counting in session capSess, whose
	// process dropped them with the file's slot (capMoved): renewing that
	// session no longer renews them. It binds only while they are held in
	// capSess: moved to the new owner's session, or lost, they are free
	// of it.
	validCap time.Time
	capSess  *lockSession
	// given counts locks handed back or lost: what the handle knew of
	// their stripes' contents (a sealed file's last block) may be stale.
	given atomic.Uint64
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
// for), sent at sent, with the size it hands over and the dirty marks it
// names; it reports false for a grant from a process since replaced.
func (f *File) takeGrant(g *mdsproto.ExtentGrant, sent time.Time) bool {
	ls := f.c.lockSessionAt(g.Server)
	defer f.c.releaseLockSession(ls)
	f.useLockSession(ls)
	if !ls.meet(f.c.life, g.Incarnation, g.SessionEpoch) { // before: the grant is not among what is reclaimed or lost
		return false
	}
	ls.extend(sent, time.Duration(g.LeaseNs))
	ls.join(f)
	// Marks other writers made are read around from now on: a component
	// that missed one of their writes must not be read for a
	// read-modify-write (seed 50 of the simulation, with a disk failing
	// writes: a stale unit read as current, and parity computed from it).
	f.amu.Lock()
	f.takeMarksLocked(g.Dirty, g.OwnDirty)
	f.amu.Unlock()
	// The size first, then the lock: a write of another goroutine of this
	// handle that finds the lock held must find the size it hands over.
	f.mu.Lock()
	f.takeSizeLocked(g)
	f.locks.mu.Lock()
	f.locks.held = addSpan(f.locks.held, stripeSpan{g.Lo, g.Hi})
	f.locks.seq = max(f.locks.seq, g.Seq)
	f.locks.mu.Unlock()
	f.mu.Unlock()
	return true
}

// takeSize adopts the size a grant handed over (under mu). A newer
// generation means another handle truncated the file: this handle's
// view is replaced. Bytes below the size may hold other writers' data,
// acknowledged or about to be: overwriting part of a stripe there goes
// through the two-phase commit.
func (f *File) takeSizeLocked(g *mdsproto.ExtentGrant) {
	switch {
	case g.SizeGen > f.sizeGen:
		f.setSizeLocked(g.End)
		f.committed, f.sizeGen = g.End, g.SizeGen
		// Another handle cut the file: the extents this one knew may
		// claim data its objects no longer hold (reads would take them
		// for lost). The grant's replace them.
		f.lmu.Lock()
		f.ext, f.extGen = slices.Clone(g.Extents), g.SizeGen
		f.lmu.Unlock()
		// What this handle wrote before the cut may be gone: its record
		// starts again from what it writes now.
		f.amu.Lock()
		f.wrote = nil
		f.amu.Unlock()
	case g.SizeGen == f.sizeGen:
		f.setSizeLocked(max(f.size, g.End))
		f.committed = max(f.committed, g.End)
		f.lmu.Lock()
		f.ext = raiseExtents(f.ext, g.Extents)
		f.lmu.Unlock()
	}
}

// raiseExtents is ext raised, group by group, to what a record of the
// same size generation says (a copy: ext is shared with the attributes
// it came with).
func raiseExtents(ext, by []int64) []int64 {
	out := slices.Clone(ext)
	for i, e := range by {
		if i >= len(out) {
			out = append(out, e)
		} else {
			out[i] = max(out[i], e)
		}
	}
	return out
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
		// A lapsed lease (the MDS unreachable for a while) is asked again,
		// not forgotten: the answer's session epoch says whether the MDS
		// kept the locks (then buffered stripes stand) or dropped them
		// (then loseLocks fails what was buffered under them).
		if covers(l.held, lo, hi) && f.locksValidLocked(time.Now()) {
			l.using++
			l.mu.Unlock()
			return f.unpinLocks, nil
		}
		l.mu.Unlock()
		if try == maxLockTries {
			return nil, wire.Errorf(wire.ErrBusy, "%s: stripes %d-%d: recalled %d times before they could be written", f.path, lo, hi-1, try)
		}
		if err := f.askLock(ctx, lo, hi); err != nil {
			return nil, fmt.Errorf("%s: lock stripes %d-%d: %w", f.path, lo, hi-1, err)
		}
	}
}

// askLock asks the MDS for stripes [lo, hi) and takes the grant. While
// it asks, a recall of a grant this handle has not seen waits: it may be
// for this one.
func (f *File) askLock(ctx context.Context, lo, hi int64) error {
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
		return err
	}
	f.takeGrant(&g, sent) // one from a replaced process is dropped: the caller asks again
	return nil
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
	if covers(l.held, fs, fs+1) && f.locksValidLocked(time.Now()) {
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
	l.given.Add(1)
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
		f.flushStripesLocked(r.Lo, r.Hi)
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
// Writes under them go on meanwhile: the new process grants nothing else
// until its grace ends, and a reclaim refused (too late) loses them.
func (f *File) reclaim(ctx context.Context, s *lockSession) {
	req, ok := f.reclaimReq(s.id)
	if !ok {
		return
	}
	if s.addr != "" {
		ctx = toMDS(ctx, s.addr) // at the process of the session they stay in (a move took the others)
	}
	var g mdsproto.ExtentGrant
	if err := f.c.mds(ctx, mdsproto.OpExtentReclaim, req, &g); err != nil {
		f.loseLocks(fmt.Errorf("%s: extent locks lost across an MDS restart: %w", f.path, err))
		return
	}
	f.locks.mu.Lock()
	f.locks.seq = g.Seq // the new process numbers its grants afresh
	f.locks.mu.Unlock()
}

// reclaimReq asks for the locks the handle holds back, in session, with
// its view of the size (false: it holds none).
func (f *File) reclaimReq(session uint64) (mdsproto.ReclaimReq, bool) {
	l := &f.locks
	l.mu.Lock()
	spans := make([][2]int64, 0, len(l.held))
	for _, h := range l.held {
		spans = append(spans, [2]int64{h.lo, h.hi})
	}
	l.mu.Unlock()
	if len(spans) == 0 {
		return mdsproto.ReclaimReq{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return mdsproto.ReclaimReq{Ino: f.layoutIno(), Handle: f.handle, Session: session, Spans: spans, End: f.size, SizeGen: f.sizeGen}, true
}

// loseLocks drops every lock the handle holds, without handing them back
// (the MDS no longer knows them). What it had not made durable under them
// is dropped and the handle fails with why: a stripe it buffered, or a
// unit write kept to be sent again, would otherwise land over another
// writer's. Writes already made durable stand.
func (f *File) loseLocks(why error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &f.locks
	l.mu.Lock()
	l.held = nil
	l.capSess = nil
	l.given.Add(1)
	l.mu.Unlock()
	undurable := f.dropBuffersLocked()
	u := f.dropUnsynced()
	if undurable || len(u.writes) > 0 {
		l.mu.Lock()
		l.lost = why
		l.mu.Unlock()
		f.setErr(why)
	}
	f.lockSession().wake() // a sync or close waiting for them fails now
}

// releaseLocks gives back every lock the handle holds (its lease is
// left to run out, which would otherwise keep them).
func (f *File) releaseLocks(ctx context.Context) {
	f.locks.left.Store(true)
	f.lockSession().leave(f)
	f.locks.mu.Lock()
	had, seq := len(f.locks.held) > 0, f.locks.seq
	f.locks.held = nil
	f.locks.mu.Unlock()
	if had {
		// The committed size, not the handle's view: what it wrote past
		// it was aborted or failed, and the next holder must not commit it.
		req := mdsproto.ExtentReq{Ino: f.layoutIno(), Handle: f.handle, Session: f.c.locks.id, Lo: 0, Hi: mdsproto.MaxStripe,
			End: f.committed, SizeGen: f.sizeGen, Seq: seq}
		_ = f.c.mds(ctx, mdsproto.OpExtentRelease, req, nil)
	}
}

// stripesOf is the stripes bytes [off, off+n) touch.
func stripesOf(off, n, stripeBytes int64) (int64, int64) {
	return off / stripeBytes, (off+max(n, 1)-1)/stripeBytes + 1
}

// sessionEpoch is the lock session's epoch as the client last saw it
// (for tests).
func (s *lockSession) sessionEpoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// lockSessionAt is the session with the MDS process at addr, the one
// that granted: with several active, one per process, all under the
// client's one session id; for "" (one active MDS, which names no
// address) the client's one session, which follows whichever serves.
// The caller releases it (releaseLockSession) once its handle joined it.
func (c *Client) lockSessionAt(addr string) *lockSession {
	if addr == "" {
		return c.locks
	}
	c.lockSessMu.Lock()
	defer c.lockSessMu.Unlock()
	if c.lockSessions == nil {
		c.lockSessions = map[string]*lockSession{}
	}
	s := c.lockSessions[addr]
	if s == nil {
		c.pruneLockSessionsLocked()
		s = newLockSession(c)
		s.id, s.addr = c.locks.id, addr
		c.lockSessions[addr] = s
	}
	s.pins++
	return s
}

// releaseLockSession ends the use lockSessionAt pinned s for: the
// handle joined it (or gave up), and it may be pruned once idle.
func (c *Client) releaseLockSession(s *lockSession) {
	if s == c.locks {
		return
	}
	c.lockSessMu.Lock()
	defer c.lockSessMu.Unlock()
	s.pins--
}

// pruneLockSessionsLocked forgets the sessions with processes no handle
// holds locks from and whose LockWait loop has ended, so processes that
// came and went (a restart on a new port) are not remembered for good:
// the map holds at most a session per process some handle holds locks
// from, and one per loop still running a lease past its last handle
// (c.lockSessMu held). A handle that still names a forgotten session
// holds nothing in it; its next grant from that process opens a new one.
// One handed out and not released yet is kept: its handle may be about
// to join it.
func (c *Client) pruneLockSessionsLocked() {
	for addr, s := range c.lockSessions {
		s.mu.Lock()
		idle := len(s.files) == 0 && !s.running
		s.mu.Unlock()
		if idle && s.pins == 0 {
			delete(c.lockSessions, addr)
		}
	}
}

// lockSession is the session the handle's locks are held in.
func (f *File) lockSession() *lockSession {
	if s := f.locks.sess.Load(); s != nil {
		return s
	}
	return f.c.locks
}

// useLockSession makes ls the session of the handle's locks. Locks held
// in another (the file's slot moved to another MDS process, which knows
// nothing of them) are lost.
func (f *File) useLockSession(ls *lockSession) {
	old, moved, had := f.enterSession(nil, ls)
	if !moved || old == nil {
		return
	}
	old.leave(f)
	if had {
		f.loseLocks(fmt.Errorf("%s: extent locks lost: the file moved to another MDS process", f.path))
	}
}
