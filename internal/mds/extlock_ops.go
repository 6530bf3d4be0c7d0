package mds

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/core/extlock"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// keyLocksHeld marks that extent locks may be held: a process that finds
// it at start grants none for a lease, until every holder of a lock the
// previous process granted has stopped trusting it. It is set before the
// first grant after the table was empty and cleared once the table has
// been empty for a lease, so a quiet cluster starts without the wait.

// keyIncarnation counts MDS starts: a process's incarnation names the
// locks it granted, and a client orders two by it (a late answer from a
// process that died must not undo what the client learned from the next).

// extentLocks serves the extent lock protocol (internal/core/extlock) for
// the files this process owns: grants, recalls and the standing LockWait
// of each client session, the mark that locks may be held, and the
// incarnation that names this process's grants.
type extentLocks struct {
	kv    kv.Engine
	cfg   *Config
	shell lockShell
	route *router // slot ownership; how clients name this process
	table *lockTable
	// incarnation names this process to clients holding its extent
	// locks (and caches): it counts MDS starts (keyIncarnation).
	incarnation uint64
	marked      atomic.Bool // keyLocksHeld is stored
	markMu      sync.RWMutex
}

// lockShell is what extent locks ask of the rest of the MDS.
type lockShell interface {
	// mayWriteHandle checks that the caller holds handle open for writing.
	mayWriteHandle(ctx context.Context, ino, handle uint64) error
}

// start sets up the extent lock table, in grace if locks may be
// held from before.
func (l *extentLocks) start(ctx context.Context) error {
	l.table = newLockTable(l.cfg.LockLease, l.cfg.Now())
	return l.kv.Update(ctx, func(tx kv.Txn) error {
		var n uint64
		if _, err := getRecord(tx, keyIncarnation, &n); err != nil {
			return err
		}
		n++
		l.incarnation = n
		if err := putRecord(tx, keyIncarnation, n); err != nil {
			return err
		}
		v, err := tx.Get(keyLocksHeld)
		if err != nil {
			return err
		}
		if v != nil {
			l.marked.Store(true)
			l.table.grace(l.cfg.Now(), l.cfg.TakeoverGrace)
		}
		return nil
	})
}

// markHeld stores the mark before a grant, if it is not there, and
// returns with markMu read-held: the caller grants, then unlocks, so
// clearHeld (which write-holds it) never removes the mark between
// its check that no lock is held and the delete.
func (l *extentLocks) markHeld(ctx context.Context) error {
	for try := 0; ; try++ {
		if try == 8 {
			return wire.Errorf(wire.ErrBusy, "extent lock mark raced with its removal %d times", try)
		}
		l.markMu.RLock()
		if l.marked.Load() {
			return nil
		}
		l.markMu.RUnlock()
		l.markMu.Lock()
		if !l.marked.Load() {
			if err := l.kv.Update(ctx, func(tx kv.Txn) error { return tx.Put(keyLocksHeld, []byte{1}) }); err != nil {
				l.markMu.Unlock()
				return err
			}
			l.marked.Store(true)
		}
		l.markMu.Unlock()
		// Checked again under the read lock: a clear may have run in
		// between (only with no lock held; then it is stored again).
	}
}

// clearHeld removes the mark once no lock has been held for a lease.
func (l *extentLocks) clearHeld(ctx context.Context) error {
	if !l.marked.Load() {
		return nil
	}
	l.markMu.Lock()
	defer l.markMu.Unlock()
	now := l.cfg.Now()
	if empty, since := l.table.empty(now); !empty || now.Sub(since) < l.cfg.LockLease {
		return nil
	}
	// Grants read-hold markMu from the mark check to the grant, so
	// none happens between the check above and the delete.
	if err := l.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(keyLocksHeld) }); err != nil {
		return err
	}
	l.marked.Store(false)
	return nil
}

func validExtent(req mdsproto.ExtentReq) error {
	switch {
	case req.Handle == 0 || req.Session == 0:
		return wire.Errorf(wire.ErrInvalid, "extent lock without a handle and session")
	case req.Lo < 0 || req.Hi <= req.Lo || req.Hi > mdsproto.MaxStripe:
		return wire.Errorf(wire.ErrInvalid, "extent lock on stripes [%d, %d)", req.Lo, req.Hi)
	case req.End < 0:
		return wire.Errorf(wire.ErrInvalid, "negative size")
	}
	return nil
}

// lock grants the write lock on a stripe range, recalling it from
// the handles that hold parts of it and waiting (lockAcquireWindow at
// most: then ErrBusy, and the client asks again) until they gave it back.
func (l *extentLocks) lock(ctx context.Context, req mdsproto.ExtentReq) (mdsproto.ExtentGrant, error) {
	if err := validExtent(req); err != nil {
		return mdsproto.ExtentGrant{}, err
	}
	if err := l.route.needOwner(req.Ino); err != nil {
		return mdsproto.ExtentGrant{}, err
	}
	if err := l.shell.mayWriteHandle(ctx, req.Ino, req.Handle); err != nil {
		return mdsproto.ExtentGrant{}, err
	}
	deadline := time.NewTimer(lockAcquireWindow)
	defer deadline.Stop()
	for {
		g, granted, r, released, err := l.tryLock(ctx, req, true, false)
		if err != nil || granted {
			return g, err
		}
		var retry <-chan time.Time
		if !r.Until.IsZero() {
			t := time.NewTimer(r.Until.Sub(l.cfg.Now()))
			defer t.Stop()
			retry = t.C
		}
		select {
		case <-released:
		case <-retry:
		case <-deadline.C:
			if r.Full {
				return mdsproto.ExtentGrant{}, wire.Errorf(wire.ErrBusy, "the MDS holds as many extent locks as it may")
			}
			return mdsproto.ExtentGrant{}, wire.Errorf(wire.ErrBusy, "inode %d stripes [%d, %d): held by another writer", req.Ino, req.Lo, req.Hi)
		case <-ctx.Done():
			return mdsproto.ExtentGrant{}, ctx.Err()
		}
	}
}

// tryLock asks the table once, and fills in the grant from the
// inode (its size as the MDS knows it), read once the lock is held. The
// inode is read before too, to refuse anything but a file, unless the
// caller knows it is one (an open: isFile).
func (l *extentLocks) tryLock(ctx context.Context, req mdsproto.ExtentReq, recall, isFile bool) (mdsproto.ExtentGrant, bool, extlock.Acquired, <-chan struct{}, error) {
	var rec *inodeRec
	if !isFile {
		if err := l.kv.View(ctx, func(r kv.Reader) error {
			var err error
			rec, err = getInode(r, req.Ino)
			return err
		}); err != nil {
			return mdsproto.ExtentGrant{}, false, extlock.Acquired{}, nil, err
		}
		if rec.Type != mdsproto.TypeFile {
			return mdsproto.ExtentGrant{}, false, extlock.Acquired{}, nil, wire.Errorf(wire.ErrIsDir, "inode %d", req.Ino)
		}
	}
	if err := l.markHeld(ctx); err != nil {
		return mdsproto.ExtentGrant{}, false, extlock.Acquired{}, nil, err
	}
	r, released := l.table.acquire(l.cfg.Now(), req.Ino, req.Session, req.Handle, span{Lo: req.Lo, Hi: req.Hi}, true, recall)
	l.markMu.RUnlock()
	if !r.Granted {
		return mdsproto.ExtentGrant{}, false, r, released, nil
	}
	// Granted after the file's slot moved to another process (a request
	// that passed its owner check before the table changed, or a waiter
	// woken by the locks dropped with the slot): given back, for the new
	// owner to grant. The table is stored before the locks are dropped,
	// so a grant that missed the drop sees the new table here.
	if err := l.route.needOwner(req.Ino); err != nil {
		l.table.release(req.Ino, req.Handle, r.Grant, r.Seq, -1, 0)
		return mdsproto.ExtentGrant{}, false, extlock.Acquired{}, nil, err
	}
	// Read again now the lock is held: a cut (and the release of the
	// stripes it held) may have committed since the first read, and the
	// grant must hand over the size and extents as of the grant. No cut
	// of these stripes can commit from now on without recalling it.
	if err := l.kv.View(ctx, func(rd kv.Reader) error {
		now, err := getInode(rd, req.Ino)
		if err == nil {
			rec = now
		} else if rec != nil {
			err = nil // the record read before stands
		}
		return err
	}); err != nil {
		l.table.release(req.Ino, req.Handle, r.Grant, r.Seq, -1, 0)
		return mdsproto.ExtentGrant{}, false, extlock.Acquired{}, nil, err
	}
	g := mdsproto.ExtentGrant{Incarnation: l.incarnation, Server: l.route.grantServer(), SessionEpoch: r.Epoch, Seq: r.Seq, Lo: r.Grant.Lo, Hi: r.Grant.Hi, End: rec.Stored(), SizeGen: rec.SizeGen,
		LeaseNs: int64(l.cfg.LockLease), Dirty: rec.Dirty, OwnDirty: ownDirty(rec, req.Handle), Extents: rec.Extents}
	if r.EndGen == rec.SizeGen {
		g.End = max(g.End, r.End)
	}
	return g, true, r, nil, nil
}

// openLock is the whole-file lock an open for writing asks for: granted
// if no other handle holds a lock on the file, never waited for.
func (l *extentLocks) openLock(ctx context.Context, ino, session, handle uint64) *mdsproto.ExtentGrant {
	if session == 0 || handle == 0 {
		return nil
	}
	req := mdsproto.ExtentReq{Ino: ino, Session: session, Handle: handle, Lo: 0, Hi: mdsproto.MaxStripe}
	g, granted, _, _, err := l.tryLock(ctx, req, false, true)
	if err != nil || !granted {
		return nil // the writer asks per stripe range when it writes
	}
	return &g
}

// release gives back a range the holder was asked for (or no
// longer needs), with its view of the size.
func (l *extentLocks) release(ctx context.Context, req mdsproto.ExtentReq) (struct{}, error) {
	if err := validExtent(req); err != nil {
		return struct{}{}, err
	}
	if err := l.route.needOwner(req.Ino); err != nil {
		return struct{}{}, err
	}
	l.table.release(req.Ino, req.Handle, span{Lo: req.Lo, Hi: req.Hi}, req.Seq, req.End, req.SizeGen)
	return struct{}{}, nil
}

// wait is a session's standing request for recalls (it renews the
// session's locks): answered at once with queued recalls, else when one
// is queued, else after the wait asked for (at most half a lease).
func (l *extentLocks) wait(ctx context.Context, req mdsproto.LockWaitReq) (mdsproto.LockWaitResp, error) {
	if req.Session == 0 {
		return mdsproto.LockWaitResp{}, wire.Errorf(wire.ErrInvalid, "no session")
	}
	if l.route.multi() && l.route.freshRoutes() == nil {
		// The table may have moved this process's slots: renewing their
		// locks could outlast the new owner's grace.
		return mdsproto.LockWaitResp{}, wire.Errorf(wire.ErrMoved, "this MDS's routing table is not current")
	}
	resp := mdsproto.LockWaitResp{LeaseNs: int64(l.cfg.LockLease), Incarnation: l.incarnation}
	a, wake, err := l.table.wait(l.cfg.Now(), req.Session)
	resp.Recalls, resp.Moved, resp.SessionEpoch = a.Recalls, a.Moved, a.Epoch
	if err != nil || wake == nil {
		return resp, err
	}
	wait := time.Duration(min(max(req.WaitNs, 0), lockWaitMaxNs, int64(l.cfg.LockLease/2)))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	case <-wire.ConnDone(ctx): // fenced by the client's newer connection, or gone
	}
	a = l.table.waited(l.cfg.Now(), req.Session)
	resp.Recalls, resp.Moved, resp.SessionEpoch = a.Recalls, a.Moved, a.Epoch
	return resp, nil
}

// maxReclaimSpans bounds the ranges one reclaim names.
const maxReclaimSpans = 4096

// reclaim takes back a handle's locks from the previous process.
func (l *extentLocks) reclaim(ctx context.Context, req mdsproto.ReclaimReq) (mdsproto.ExtentGrant, error) {
	if req.Handle == 0 || req.Session == 0 || len(req.Spans) == 0 || len(req.Spans) > maxReclaimSpans || req.End < 0 {
		return mdsproto.ExtentGrant{}, wire.Errorf(wire.ErrInvalid, "reclaim of %d ranges", len(req.Spans))
	}
	if err := l.route.needOwner(req.Ino); err != nil {
		return mdsproto.ExtentGrant{}, err
	}
	if err := l.shell.mayWriteHandle(ctx, req.Ino, req.Handle); err != nil {
		return mdsproto.ExtentGrant{}, err
	}
	spans := make([]span, 0, len(req.Spans))
	for _, sp := range req.Spans {
		if sp[0] < 0 || sp[1] <= sp[0] || sp[1] > mdsproto.MaxStripe {
			return mdsproto.ExtentGrant{}, wire.Errorf(wire.ErrInvalid, "reclaim of stripes [%d, %d)", sp[0], sp[1])
		}
		spans = append(spans, span{Lo: sp[0], Hi: sp[1]})
	}
	seq, epoch, err := l.table.reclaim(l.cfg.Now(), req.Ino, req.Session, req.Handle, spans, req.End, req.SizeGen)
	if err != nil {
		return mdsproto.ExtentGrant{}, err
	}
	return mdsproto.ExtentGrant{Incarnation: l.incarnation, Server: l.route.grantServer(), SessionEpoch: epoch, Seq: seq, LeaseNs: int64(l.cfg.LockLease)}, nil
}
