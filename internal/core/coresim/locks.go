package coresim

import (
	"slices"
	"time"

	"github.com/braidfs/braid/internal/core/extlock"
	"github.com/braidfs/braid/internal/core/route"
)

// lockClient is a client session's view of its extent locks.
type lockClient struct {
	session uint64
	// trustFrom is when it last sent a LockWait or acquire: it trusts
	// its locks until a lease after.
	trustFrom time.Time
	epoch     uint64
	incarn    uint64                // the incarnation epoch is of
	held      map[uint64][]heldSpan // by inode
}

// heldSpan is a range one of the client's handles holds, with its grant
// and the MDS incarnation that granted (or took back) it.
type heldSpan struct {
	handle uint64
	span   extlock.Span
	seq    uint64
	incarn uint64
}

func (c *lockClient) trusts(now time.Time, lease time.Duration) bool {
	return now.Before(c.trustFrom.Add(lease))
}

// handle is one of the client's two handles (per file the same two).
func (e *env) handle(c *lockClient) uint64 { return c.session*10 + uint64(e.rng.IntN(2)) }

func (e *env) randomSpan() extlock.Span {
	lo := int64(e.rng.IntN(8))
	if e.rng.IntN(6) == 0 {
		return extlock.Span{Lo: lo, Hi: extlock.MaxStripe}
	}
	return extlock.Span{Lo: lo, Hi: lo + 1 + int64(e.rng.IntN(3))}
}

func (e *env) lockAcquire() {
	c := e.lockC[e.rng.IntN(len(e.lockC))]
	ino := e.pickFile()
	if !e.owned[route.SlotOf(ino)] {
		return // served elsewhere: the MDS refuses before the table decides
	}
	h := e.handle(c)
	want := e.randomSpan()
	r := e.locks.Acquire(e.now, ino, c.session, h, want, e.rng.IntN(4) == 0, e.rng.IntN(5) > 0)
	e.applyLockEffects()
	e.answered(c)
	if !r.Granted {
		e.note("acquire %d/%d %v: wait=%v full=%v", ino, h, want, r.Wait, r.Full)
		return
	}
	e.note("acquire %d/%d %v: granted %v seq %d", ino, h, want, r.Grant, r.Seq)
	e.noteEpoch(c, r.Epoch)
	c.trustFrom = e.now
	e.checkExclusive(ino, h, r.Grant)
	c.held[ino] = append(c.held[ino], heldSpan{handle: h, span: r.Grant, seq: r.Seq, incarn: e.lockIncarn})
}

// answered: a client that hears from a new incarnation of the MDS drops
// the locks it did not take back there in its grace.
func (e *env) answered(c *lockClient) {
	for ino, hs := range c.held {
		c.held[ino] = slices.DeleteFunc(hs, func(h heldSpan) bool { return h.incarn < e.lockIncarn })
	}
	if c.incarn != e.lockIncarn {
		c.incarn, c.epoch = e.lockIncarn, 0
	}
}

// noteEpoch: a new epoch means the session's locks were dropped (it was
// silent past the lease): the client stops trusting what it held.
func (e *env) noteEpoch(c *lockClient, epoch uint64) {
	if c.epoch != 0 && epoch != c.epoch {
		for ino := range c.held {
			delete(c.held, ino)
		}
	}
	c.epoch = epoch
}

// checkExclusive: no other handle still trusts a lock overlapping a
// grant.
func (e *env) checkExclusive(ino, h uint64, grant extlock.Span) {
	for _, o := range e.lockC {
		if !o.trusts(e.now, e.cfg.Lease) {
			continue
		}
		for _, hs := range o.held[ino] {
			if hs.handle != h && hs.span.Overlaps(grant) {
				e.fail("inode %d stripes %v granted to handle %d while handle %d (session %d) trusts %v until +%v",
					ino, grant, h, hs.handle, o.session, hs.span, o.trustFrom.Add(e.cfg.Lease).Sub(e.start))
			}
		}
	}
}

func (e *env) applyLockEffects() {
	fx := e.locks.TakeEffects()
	if len(fx.Released) > 0 || len(fx.Woken) > 0 {
		e.note("released %v woke %v", fx.Released, fx.Woken)
	}
}

// release drops part of the client's model of what it holds: the
// grants of handle up to seq overlapping r.
func (c *lockClient) release(ino, handle uint64, r extlock.Span, seq uint64) {
	var kept []heldSpan
	for _, hs := range c.held[ino] {
		if hs.handle != handle || hs.seq > seq || !hs.span.Overlaps(r) {
			kept = append(kept, hs)
			continue
		}
		if hs.span.Lo < r.Lo {
			left := hs
			left.span.Hi = r.Lo
			kept = append(kept, left)
		}
		if r.Hi < hs.span.Hi {
			right := hs
			right.span.Lo = r.Hi
			kept = append(kept, right)
		}
	}
	c.held[ino] = kept
}

func (e *env) lockRelease() {
	c := e.lockC[e.rng.IntN(len(e.lockC))]
	inos := sortedKeys(c.held)
	if len(inos) == 0 {
		return
	}
	ino := inos[e.rng.IntN(len(inos))]
	if len(c.held[ino]) == 0 || !e.owned[route.SlotOf(ino)] {
		return
	}
	hs := c.held[ino][e.rng.IntN(len(c.held[ino]))]
	// The client's model goes first: it stops using the range before it
	// sends the release.
	c.release(ino, hs.handle, hs.span, hs.seq)
	e.locks.Release(ino, hs.handle, hs.span, hs.seq, int64(e.rng.IntN(100)), 0)
	e.applyLockEffects()
	e.note("release %d/%d %v", ino, hs.handle, hs.span)
}

// lockWait is a session's LockWait: it renews the session's locks, and
// the client gives back what is recalled and forgets what moved.
func (e *env) lockWait() { e.lockWaitOf(e.lockC[e.rng.IntN(len(e.lockC))]) }

func (e *env) lockWaitOf(c *lockClient) {
	sent := e.now
	a, wait, err := e.locks.Wait(e.now, c.session)
	if err != nil {
		e.note("wait %d: %v", c.session, err)
		return
	}
	if wait {
		a = e.locks.Waited(e.now, c.session)
	}
	e.applyLockEffects()
	e.answered(c)
	e.noteEpoch(c, a.Epoch)
	c.trustFrom = sent
	for _, ino := range a.Moved {
		delete(c.held, ino) // reclaimed at the new owner in the real system
	}
	for _, r := range a.Recalls {
		sp := extlock.Span{Lo: r.Lo, Hi: r.Hi}
		c.release(r.Ino, r.Handle, sp, r.Seq)
		if e.owned[route.SlotOf(r.Ino)] {
			e.locks.Release(r.Ino, r.Handle, sp, r.Seq, 0, 0)
			e.applyLockEffects()
		}
	}
	e.note("wait %d: epoch %d, %d recalls, %d moved", c.session, a.Epoch, len(a.Recalls), len(a.Moved))
}

// lockClose closes a handle: its locks go.
func (e *env) lockClose() {
	c := e.lockC[e.rng.IntN(len(e.lockC))]
	ino := e.pickFile()
	h := e.handle(c)
	var kept []heldSpan
	for _, hs := range c.held[ino] {
		if hs.handle != h {
			kept = append(kept, hs)
		}
	}
	c.held[ino] = kept
	if e.owned[route.SlotOf(ino)] {
		e.locks.DropHandle(ino, h)
		e.applyLockEffects()
	}
	e.note("close %d/%d", ino, h)
}

// lockReclaim: after a restart, a client takes back all it held, in
// the grace.
func (e *env) lockReclaim() { e.lockReclaimOf(e.lockC[e.rng.IntN(len(e.lockC))]) }

func (e *env) lockReclaimOf(c *lockClient) {
	if !c.trusts(e.now, e.cfg.Lease) {
		return
	}
	for _, ino := range sortedKeys(c.held) {
		if !e.owned[route.SlotOf(ino)] || len(c.held[ino]) == 0 {
			continue
		}
		byHandle := map[uint64][]extlock.Span{}
		for _, hs := range c.held[ino] {
			byHandle[hs.handle] = append(byHandle[hs.handle], hs.span)
		}
		for _, h := range sortedKeys(byHandle) {
			seq, epoch, err := e.locks.Reclaim(e.now, ino, c.session, h, byHandle[h], 0, 0)
			e.applyLockEffects()
			e.note("reclaim %d/%d: seq %d epoch %d err %v", ino, h, seq, epoch, err)
			if err != nil {
				continue
			}
			for _, sp := range byHandle[h] {
				e.checkExclusive(ino, h, sp)
			}
			for i := range c.held[ino] {
				if c.held[ino][i].handle == h {
					c.held[ino][i].seq, c.held[ino][i].incarn = seq, e.lockIncarn
				}
			}
			c.epoch, c.incarn, c.trustFrom = epoch, e.lockIncarn, e.now
		}
	}
	e.answered(c) // what it could not take back, it no longer holds
}

// slotMove moves slot 1 away from the simulated MDS, or back: moved
// away, its files' locks are dropped (their sessions told); back, its
// grants wait the gained slot's grace.
func (e *env) slotMove() {
	const slot = 1
	if e.owned[slot] {
		delete(e.owned, slot)
		e.locks.DropInos(e.now, func(ino uint64) bool { return route.SlotOf(ino) == slot })
		e.note("slot %d moved away", slot)
		// The sessions' standing LockWaits are answered at once: each
		// client learns which files moved before it asks anything else.
		woken := e.locks.TakeEffects().Woken
		for _, c := range e.lockC {
			if slices.Contains(woken, c.session) {
				e.lockWaitOf(c)
			}
		}
	} else {
		e.owned[slot] = true
		e.locks.GraceSlots(e.now, []uint32{slot}, 0)
		e.note("slot %d back", slot)
	}
	e.applyLockEffects()
}
