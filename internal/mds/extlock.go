package mds

import (
	"errors"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/core/extlock"
	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/wire"
)

// Extent locks (the protocol is in internal/core/extlock's doc): the
// core's table decides; lockTable serialises calls to it and turns the
// effects of each decision into wakeups for the requests waiting on
// them. The handlers in extlock_ops.go do the waiting.

// Limits of the handlers.
const (
	defaultLockLease  = 4 * time.Second
	lockWaitMaxNs     = int64(30 * time.Second)
	lockAcquireWindow = time.Second // an OpExtentLock waits this long for holders before ErrBusy
)

type span = extlock.Span

// lockTable is the core's table behind a mutex, with what waits on it.
type lockTable struct {
	mu sync.Mutex
	t  *extlock.Table
	// fileWait is closed when a lock on the file goes: its waiters try
	// again. Only files with locks have one (a wait follows a conflict).
	fileWait map[uint64]chan struct{}
	// sessionWake is closed when a recall or a move is queued for the
	// session's waiting LockWait.
	sessionWake map[uint64]chan struct{}
}

func newLockTable(lease time.Duration, now time.Time) *lockTable {
	return &lockTable{t: extlock.New(lease, now, route.SlotOf), fileWait: map[uint64]chan struct{}{}, sessionWake: map[uint64]chan struct{}{}}
}

// do runs one decision and wakes what it says.
func (l *lockTable) do(decide func(t *extlock.Table)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	decide(l.t)
	l.applyLocked()
}

func (l *lockTable) applyLocked() {
	e := l.t.TakeEffects()
	for _, ino := range e.Released {
		if ch := l.fileWait[ino]; ch != nil {
			close(ch)
			delete(l.fileWait, ino)
		}
	}
	for _, id := range e.Woken {
		if ch := l.sessionWake[id]; ch != nil {
			close(ch)
			delete(l.sessionWake, id)
		}
	}
}

// acquire asks the core for a lock; a wait comes with the channel to
// wait on, taken under the same lock as the decision so no release
// falls between them.
func (l *lockTable) acquire(now time.Time, ino, session, handle uint64, want span, whole, recall bool) (extlock.Acquired, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.t.Acquire(now, ino, session, handle, want, whole, recall)
	l.applyLocked()
	if !r.Wait {
		return r, nil
	}
	ch := l.fileWait[ino]
	if ch == nil {
		ch = make(chan struct{})
		l.fileWait[ino] = ch
	}
	return r, ch
}

// wait is the core's Wait, with the channel a LockWait with nothing to
// answer waits on.
func (l *lockTable) wait(now time.Time, session uint64) (extlock.Answer, <-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, wait, err := l.t.Wait(now, session)
	l.applyLocked()
	if err != nil || !wait {
		return a, nil, lockErr(err)
	}
	ch := l.sessionWake[session]
	if ch == nil {
		ch = make(chan struct{})
		l.sessionWake[session] = ch
	}
	return a, ch, nil
}

// waited ends a LockWait that waited.
func (l *lockTable) waited(now time.Time, session uint64) extlock.Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.sessionWake, session)
	a := l.t.Waited(now, session)
	l.applyLocked()
	return a
}

func (l *lockTable) reclaim(now time.Time, ino, session, handle uint64, spans []span, end int64, gen uint64) (seq, epoch uint64, err error) {
	l.do(func(t *extlock.Table) { seq, epoch, err = t.Reclaim(now, ino, session, handle, spans, end, gen) })
	return seq, epoch, lockErr(err)
}

func (l *lockTable) release(ino, handle uint64, r span, seq uint64, end int64, gen uint64) {
	l.do(func(t *extlock.Table) { t.Release(ino, handle, r, seq, end, gen) })
}

func (l *lockTable) dropHandle(ino, handle uint64) {
	l.do(func(t *extlock.Table) { t.DropHandle(ino, handle) })
}

func (l *lockTable) truncated(ino, gen uint64) {
	l.do(func(t *extlock.Table) { t.Truncated(ino, gen) })
}

func (l *lockTable) committed(ino uint64, size int64, gen uint64) {
	l.do(func(t *extlock.Table) { t.Committed(ino, size, gen) })
}

func (l *lockTable) grace(now time.Time, extra time.Duration) {
	l.do(func(t *extlock.Table) { t.Grace(now, extra) })
}

func (l *lockTable) graceSlots(now time.Time, slots []uint32, extra time.Duration) {
	l.do(func(t *extlock.Table) { t.GraceSlots(now, slots, extra) })
}

func (l *lockTable) dropInos(now time.Time, gone func(ino uint64) bool) {
	l.do(func(t *extlock.Table) { t.DropInos(now, gone) })
}

func (l *lockTable) empty(now time.Time) (empty bool, since time.Time) {
	l.do(func(t *extlock.Table) { empty, since = t.Empty(now) })
	return empty, since
}

// lockErr is the core's refusal as the wire says it.
func lockErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, extlock.ErrFull):
		return wire.Errorf(wire.ErrBusy, "%v", err)
	default:
		return wire.Errorf(wire.ErrInvalid, "%v", err)
	}
}
