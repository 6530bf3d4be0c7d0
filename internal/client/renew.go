package client

import (
	"context"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
)

// leaseRenewer renews the leases of all of a client's open handles, one
// request per round for all that are due (point 5 of issue 13: batched
// renewals): a client with a thousand files open sends one renewal, not a
// thousand. Leases due within half their interval ride along, so rounds
// merge.
type leaseRenewer struct {
	c       *Client
	mu      sync.Mutex
	cond    *sync.Cond // signalled when a round ends
	held    map[uint64]*heldLease
	sending map[uint64]bool // handles in the round being sent
	wake    chan struct{}
	running bool
}

type heldLease struct {
	ref   mdsproto.LeaseRef
	every time.Duration
	next  time.Time
}

func newLeaseRenewer(c *Client) *leaseRenewer {
	r := &leaseRenewer{c: c, held: map[uint64]*heldLease{}, sending: map[uint64]bool{}, wake: make(chan struct{}, 1)}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// add renews ref's lease every interval until remove.
func (r *leaseRenewer) add(ref mdsproto.LeaseRef, every time.Duration) {
	r.mu.Lock()
	r.held[ref.Handle] = &heldLease{ref: ref, every: every, next: time.Now().Add(every)}
	if !r.running {
		r.running = true
		go r.loop(r.c.life)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// holdsIno reports whether a handle of file ino holds a lease here: the
// MDS counts the file open by this client.
func (r *leaseRenewer) holdsIno(ino uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.held {
		if l.ref.Ino == ino {
			return true
		}
	}
	return false
}

// remove stops renewing handle's lease. It returns once no renewal of it
// is on its way, so a release sent next cannot be overtaken by one.
func (r *leaseRenewer) remove(handle uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, handle)
	for r.sending[handle] {
		r.cond.Wait()
	}
}

func (r *leaseRenewer) loop(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due, wait := r.collect(time.Now())
		if len(due) > 0 {
			r.send(ctx, due)
			continue
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// collect takes the leases due now (or within half their interval) as
// the next round, at most MaxRenewBatch, or says how long until one is.
func (r *leaseRenewer) collect(now time.Time) ([]mdsproto.LeaseRef, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wait := time.Hour
	var due []mdsproto.LeaseRef
	for h, l := range r.held {
		if until := l.next.Sub(now); until > l.every/2 {
			wait = min(wait, until-l.every/2)
			continue
		}
		if len(due) == mdsproto.MaxRenewBatch {
			wait = 0
			break
		}
		due = append(due, l.ref)
		l.next = now.Add(l.every)
		r.sending[h] = true
	}
	return due, max(wait, time.Millisecond)
}

func (r *leaseRenewer) send(ctx context.Context, due []mdsproto.LeaseRef) {
	// A missed renewal costs at most a scrub (a writer's lease running
	// out) or an early delete of an unlinked file's objects held by a
	// reader; the next round tries again.
	// With several active MDS processes, each renews the leases of its
	// own slots' files: one batch an owner (routed by its first lease,
	// so a batch whose owner moved goes to the new one), all at once, so
	// an owner that is gone holds up no other's.
	byOwner := map[string][]mdsproto.LeaseRef{}
	for _, l := range due {
		owner := r.c.ownerOf(l.Ino)
		byOwner[owner] = append(byOwner[owner], l)
	}
	var wg sync.WaitGroup
	for _, refs := range byOwner {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.c.mds(ctx, mdsproto.OpRenewBatch, mdsproto.RenewBatchReq{Leases: refs}, nil); err != nil {
				r.c.refreshRoutes(ctx) // some may have moved: the next round regroups them
			}
		}()
	}
	wg.Wait()
	r.mu.Lock()
	for _, l := range due {
		delete(r.sending, l.Handle)
	}
	r.cond.Broadcast()
	r.mu.Unlock()
}
