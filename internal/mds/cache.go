package mds

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/core/cache"
	"github.com/braidfs/braid/internal/mdsproto"
)

// Metadata caches kept coherent by callbacks, and write-back directory
// claims (the protocol is in internal/core/cache's doc): the core's
// table decides; cacheTable serialises calls to it and turns the effects
// of each decision into wakeups for the requests waiting on them.
// cache_ops.go and claim_ops.go do the I/O and the waiting.
type cacheTable struct {
	mu sync.Mutex
	t  *cache.Table
	// sessionWake is closed when an invalidation is queued for the
	// session; sessionAcks when its acknowledgements advance or its
	// epoch ends; claimEnded when the directory's claim ends.
	sessionWake map[uint64]chan struct{}
	sessionAcks map[uint64]chan struct{}
	claimEnded  map[uint64]chan struct{}
	nClaims     atomic.Int64 // claims held, read without mu by the gate
}

// change is one change's view of the table.
type change = cache.Change

const (
	cacheRecallWait = cache.RecallWait
	maxSelfEntries  = cache.MaxSelfEntries
)

func newCacheTable(lease time.Duration, incarnation uint64) *cacheTable {
	return &cacheTable{t: cache.New(lease, incarnation), sessionWake: map[uint64]chan struct{}{},
		sessionAcks: map[uint64]chan struct{}{}, claimEnded: map[uint64]chan struct{}{}}
}

// applyLocked wakes what the last decision says (t.mu held).
func (t *cacheTable) applyLocked() {
	e := t.t.TakeEffects()
	wake := func(m map[uint64]chan struct{}, ids []uint64) {
		for _, id := range ids {
			if ch := m[id]; ch != nil {
				close(ch)
				delete(m, id)
			}
		}
	}
	wake(t.sessionWake, e.Woken)
	wake(t.sessionAcks, e.Acked)
	wake(t.claimEnded, e.ClaimsEnded)
	t.nClaims.Store(int64(t.t.Claims()))
}

// chanOf is m's channel for id, made if need be (t.mu held).
func chanOf(m map[uint64]chan struct{}, id uint64) chan struct{} {
	ch := m[id]
	if ch == nil {
		ch = make(chan struct{})
		m[id] = ch
	}
	return ch
}

func (t *cacheTable) do(decide func(c *cache.Table)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	decide(t.t)
	t.applyLocked()
}

func (t *cacheTable) setNoGrants(on bool) { t.do(func(c *cache.Table) { c.NoGrants = on }) }

func (t *cacheTable) noGrants() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.NoGrants
}

func (t *cacheTable) grace(now time.Time, extra time.Duration) {
	t.do(func(c *cache.Table) { c.Grace(now, extra) })
}

func (t *cacheTable) graceEnd() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.GraceEnd()
}

// waitResult is what a CacheWait gets at once.
type waitResult struct {
	epoch uint64
	invs  []mdsproto.Invalidation
	wake  <-chan struct{}
}

// wait takes a session's CacheWait, with the channel to wait on for the
// next invalidation, taken under the same lock as the decision.
func (t *cacheTable) wait(now time.Time, req mdsproto.CacheWaitReq) (waitResult, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	epoch, invs, ok := t.t.Wait(now, req.Session, req.Epoch, req.Acked)
	t.applyLocked()
	if !ok {
		return waitResult{}, false
	}
	return waitResult{epoch: epoch, invs: invs, wake: chanOf(t.sessionWake, req.Session)}, true
}

func (t *cacheTable) waited(id, epoch uint64) (uint64, []mdsproto.Invalidation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Waited(id, epoch)
}

func (t *cacheTable) begin() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Begin()
}

func (t *cacheTable) grant(now time.Time, id, epoch, gen uint64, inos ...uint64) (seq uint64, ok bool) {
	t.do(func(c *cache.Table) { seq, ok = c.Grant(now, id, epoch, gen, inos...) })
	return seq, ok
}

func newChange(requester uint64, noSelfWait bool) *change {
	return cache.NewChange(requester, noSelfWait)
}

// cover tells the table what a transaction touched.
func (t *cacheTable) cover(now time.Time, c *change, touched map[uint64]*touched) (mustWait, inGrace bool) {
	tt := make(map[uint64]cache.Touched, len(touched))
	for ino, tc := range touched {
		tt[ino] = cache.Touched{Written: tc.rec != nil, Deleted: tc.deleted, Entries: len(tc.entries)}
	}
	t.do(func(ct *cache.Table) { mustWait, inGrace = ct.Cover(now, c, tt) })
	return mustWait, inGrace
}

// pending returns the first acknowledgement c still waits for: the
// channel that tells when it may have come or, for an evicted session,
// when its lease ends (acks nil).
func (t *cacheTable) pending(now time.Time, c *change) (acks <-chan struct{}, leaseEnd time.Time, waiting bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	session, leaseEnd, waiting := t.t.Pending(now, c)
	if !waiting || session == 0 {
		return nil, leaseEnd, waiting
	}
	return chanOf(t.sessionAcks, session), leaseEnd, true
}

func (t *cacheTable) evictLaggards(c *change) { t.do(func(ct *cache.Table) { ct.EvictLaggards(c) }) }

func (t *cacheTable) end(c *change) { t.do(func(ct *cache.Table) { ct.End(c) }) }

func (t *cacheTable) expire(now time.Time) (idle bool) {
	t.do(func(c *cache.Table) { idle = c.Expire(now) })
	return idle
}

func (t *cacheTable) stats() (sessions, registered int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Stats()
}

func (t *cacheTable) grantClaim(now time.Time, id, epoch, gen, dir, claimID uint64) (ok bool) {
	t.do(func(c *cache.Table) { ok = c.GrantClaim(now, id, epoch, gen, dir, claimID) })
	return ok
}

func (t *cacheTable) loadClaim(now time.Time, dir, holder, claimID uint64) {
	t.do(func(c *cache.Table) { c.LoadClaim(now, dir, holder, claimID) })
}

func (t *cacheTable) holds(dir, holder, claimID uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Holds(dir, holder, claimID)
}

// claimBlocks reports whether dir is claimed by a session other than me.
func (t *cacheTable) claimBlocks(me, dir uint64) bool {
	if t.nClaims.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.ClaimBlocks(me, dir)
}

// recallClaim recalls the claim on dir (once) and returns what to wait
// on: its end, until its deadline. ok is false if dir is not claimed.
func (t *cacheTable) recallClaim(now time.Time, dir uint64) (ended <-chan struct{}, deadline time.Time, claimID uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	deadline, claimID, ok = t.t.RecallClaim(now, dir)
	t.applyLocked()
	if !ok {
		return nil, time.Time{}, 0, false
	}
	return chanOf(t.claimEnded, dir), deadline, claimID, true
}

func (t *cacheTable) endClaim(dir, claimID uint64) {
	t.do(func(c *cache.Table) { c.EndClaim(dir, claimID) })
}

func (t *cacheTable) overdue(now time.Time) map[uint64]uint64 {
	if t.nClaims.Load() == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Overdue(now)
}
