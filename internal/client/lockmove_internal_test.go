package client

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// A file's slot went from process A to B (A named it moved: its locks
// capped in A's session), then back to A when B died. The locks A took
// back count while A's session is renewed: the cap was for their earlier
// stay at A (seed 86 of the three-process simulation, where the stale
// cap failed a buffered stripe as lapsed at close).
func TestLocksMovedBackAreFreeOfTheOldCap(t *testing.T) {
	c := &Client{}
	a, b := newLockSession(c), newLockSession(c)
	a.addr, b.addr = "a", "b"
	now := time.Now()
	var f File
	f.initLocks()
	f.locks.held = []stripeSpan{{0, 8}}
	f.locks.sess.Store(a)
	a.extend(now, time.Minute)
	b.extend(now, time.Minute)

	capAt := now.Add(time.Second)
	a.validUntil = capAt // the lease as it stood before the answer that named the file
	a.files[1] = &f
	if got := a.capMoved([]uint64{f.layoutIno()}); len(got) != 1 {
		t.Fatalf("capMoved found %d handles, want 1", len(got))
	}
	a.extend(now, time.Minute) // A goes on renewing its session
	later := capAt.Add(time.Second)
	f.locks.mu.Lock()
	capped := f.locksValidLocked(later)
	f.locks.mu.Unlock()
	if capped {
		t.Fatal("locks capped in A's session still count past the cap")
	}

	if !enter(&f, a, b) || !enter(&f, b, a) {
		t.Fatal("enterSession refused a move from the session the locks were in")
	}
	f.locks.mu.Lock()
	valid := f.locksValidLocked(later)
	f.locks.mu.Unlock()
	if !valid {
		t.Fatal("locks A took back still bound by the cap of their earlier stay there")
	}
	if enter(&f, b, a) {
		t.Fatal("enterSession moved locks from a session they were not in")
	}
}

// enter moves f's locks from session from to to, reporting whether they moved.
func enter(f *File, from, to *lockSession) bool {
	_, moved, _ := f.enterSession(from, to)
	return moved
}

// A close waiting for lapsed locks goes on once they moved to the file's
// new owner and count there, not after the I/O timeout: the session they
// left is never renewed again (its process died).
func TestAwaitLocksFollowsAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Client{life: t.Context()}
		c.opts.IOTimeout = time.Hour
		a, b := newLockSession(c), newLockSession(c)
		var f File
		f.c, f.write = c, true
		f.initLocks()
		f.locks.held = []stripeSpan{{0, 8}}
		f.locks.sess.Store(a) // a's lease ran out: its process is gone
		start := time.Now()
		done := make(chan struct{})
		go func() {
			f.awaitLocks()
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("awaitLocks returned while the locks had lapsed")
		default:
		}
		if !enter(&f, a, b) { // wakes the wait on a
			t.Fatal("enterSession refused")
		}
		b.extend(time.Now(), time.Minute)
		<-done
		if waited := time.Since(start); waited >= c.opts.IOTimeout {
			t.Fatalf("awaitLocks waited %v (the I/O timeout) after the locks moved", waited)
		}
	})
}

// A process named a file moved while its handle held no locks (all
// recalled): the cap it set binds nothing, and must not bind a grant the
// same process makes later, the slot back with it, whether the handle
// stayed in that process's session (nothing to move) or went through
// another's (A -> B -> A by grants).
func TestACapOnNothingHeldBindsNoLaterGrant(t *testing.T) {
	for _, via := range []string{"stayed", "through another session"} {
		t.Run(via, func(t *testing.T) {
			c := &Client{life: t.Context()}
			c.locks = newLockSession(c)
			a, b := newLockSession(c), newLockSession(c)
			a.addr, b.addr = "a", "b"
			now := time.Now()
			var f File
			f.c = c
			f.initLocks()
			f.locks.sess.Store(a)
			capAt := now.Add(time.Second)
			a.validUntil = capAt
			a.files[1] = &f
			if got := a.capMoved([]uint64{f.layoutIno()}); len(got) != 1 {
				t.Fatalf("capMoved found %d handles, want 1", len(got))
			}
			if via == "stayed" {
				if !f.moveLocks(t.Context(), a, "b") {
					t.Fatal("a handle holding nothing was not moved")
				}
			} else {
				f.useLockSession(b) // a grant from b
				f.useLockSession(a) // then one from a again
			}
			a.extend(now, time.Minute)
			f.locks.mu.Lock()
			f.locks.held = []stripeSpan{{0, 8}} // the later grant from a
			valid := f.locksValidLocked(capAt.Add(time.Second))
			f.locks.mu.Unlock()
			if !valid {
				t.Fatal("a grant made after the cap is bound by it")
			}
		})
	}
}

// A client that held locks from many processes, each gone (restarted on
// another port, say), remembers only the sessions some handle holds
// locks in, or that a handle is about to join: the map does not grow
// for good.
func TestIdleLockSessionsAreForgotten(t *testing.T) {
	c := &Client{life: t.Context()}
	c.locks = newLockSession(c)
	busy := c.lockSessionAt("busy")
	busy.files[1] = &File{}
	c.releaseLockSession(busy)
	joining := c.lockSessionAt("joining") // handed out, not joined yet
	for i := range 100 {
		c.releaseLockSession(c.lockSessionAt(fmt.Sprintf("gone-%d", i)))
	}
	c.lockSessionAt("new")
	c.lockSessMu.Lock()
	defer c.lockSessMu.Unlock()
	if len(c.lockSessions) != 3 || c.lockSessions["busy"] != busy || c.lockSessions["joining"] != joining || c.lockSessions["new"] == nil {
		t.Fatalf("%d sessions remembered, want the busy one, the one being joined and the new one", len(c.lockSessions))
	}
}
