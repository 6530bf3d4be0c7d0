package mds

import (
	"context"
	"sync"

	"github.com/braidfs/braid/internal/kv"
)

// Inode numbers come from ranges each MDS process takes from the counter
// (keyNextIno) in a transaction of their own, inoRange at a time, so that
// creates do not all read and write that one key: on etcd every two
// concurrent creates conflicted on it. A range is this process's alone
// once committed; numbers of a range a process dies holding are never
// used (inode numbers need not be dense). A create that finds the range
// empty (others drained it since it was filled) takes its number from
// the counter inside its own transaction, as before ranges.

// inoRange is how many inode numbers a process takes at once.
const inoRange = 1024

type inoAlloc struct {
	mu         sync.Mutex
	next, end  uint64 // [next, end) are this process's to give
	refillLock sync.Mutex
}

// take gives the next number of the range, if any is left.
func (a *inoAlloc) take() (uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.next >= a.end {
		return 0, false
	}
	a.next++
	return a.next - 1, true
}

func (a *inoAlloc) left() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.end - a.next
}

// reset drops the range (the counter was moved under it: recovery). It
// waits for a refill in flight, whose range would be as stale.
func (a *inoAlloc) reset() {
	a.refillLock.Lock()
	defer a.refillLock.Unlock()
	a.mu.Lock()
	a.next, a.end = 0, 0
	a.mu.Unlock()
}

// ensureInodes makes sure the range holds at least n numbers, taking a
// new one from the counter if not. A failure is left to the create,
// which then takes from the counter itself.
func (s *Server) ensureInodes(ctx context.Context, n int) {
	if s.inos.left() >= uint64(n) {
		return
	}
	s.inos.refillLock.Lock() // one refill at a time; the others find it done
	defer s.inos.refillLock.Unlock()
	if s.inos.left() >= uint64(n) {
		return
	}
	size := uint64(max(n, inoRange))
	var first uint64
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		var err error
		first, err = takeFromCounter(tx, keyNextIno, rootIno+1, size)
		return err
	})
	if err != nil {
		return
	}
	s.inos.mu.Lock()
	s.inos.next, s.inos.end = first, first+size
	s.inos.mu.Unlock()
}
