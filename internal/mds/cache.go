package mds

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
)

// Metadata caches kept coherent by callbacks (Panasas' callbacks, Ceph's
// capabilities, Sigma's leases). A client session that caches names and
// attributes is registered on each inode it was granted (a directory's
// registration covers its entries). Before a change to a registered
// inode's attributes or entries commits, each registered session is sent
// a recall of that inode, its registration ends, and the change waits
// until the session has acknowledged it, the session that asked for the
// change included (its own cache holds the old state too, and its
// lookups may be on their way). A session caches the inode again only by
// asking again, so a stream of changes to one directory costs a session
// that is not looking at it one recall, not one per change. A session
// that does not acknowledge within cacheRecallWait is evicted (its
// registrations end, its next CacheWait starts a new epoch, and the
// client drops everything); the change then waits until the evicted
// session's lease has run out, counted from the newest CacheWait it
// sent, since the client counts its own lease from before it sent that
// request and so stops trusting its cache no later.
//
// A grant is refused while a change to one of its inodes is in flight,
// and when one began after the read it answers: the reader's state may
// predate the change. Registrations live in memory. A restarted MDS that
// finds the store's mark (keyCacheHeld) grants nothing and commits no
// change for one lease, by which time every client of the previous
// process has stopped trusting its cache.
//
// cacheTable decides; cache_ops.go does the I/O and the waiting.
type cacheTable struct {
	mu          sync.Mutex
	lease       time.Duration
	epochBase   uint64 // the process's incarnation, high bits of every epoch
	nextEpoch   uint64
	sessions    map[uint64]*cacheSession
	holders     map[uint64]map[uint64]*cacheSession // ino → session id → session
	changing    map[uint64]int                      // ino → changes in flight
	gen         uint64                              // changes begun so far
	recent      [recentChanges]recentChange         // the newest changes begun, by gen
	registered  int                                 // registrations, all sessions
	graceUntil  time.Time                           // nothing granted or changed before this
	noGrants    bool                                // grant nothing, ever (set at creation)
	emptySince  time.Time                           // when the last session ended
	sessionsMax int
	claims      map[uint64]*dirClaim // dir ino → its write-back claim (claim.go)
	nClaims     atomic.Int64         // len(claims), read without mu by the gate
}

const (
	recentChanges          = 1024    // changes a grant looks back over; older readers get no grant
	maxCacheSessions       = 4096    // sessions caching at once
	maxSessionRegistration = 1 << 18 // inodes one session may cache
	maxRegistrations       = 1 << 21 // inodes all sessions may cache
	maxQueuedInvalidations = 4096    // unacknowledged invalidations a session may have (all fit one answer: ~100 KB)
	maxSelfEntries         = 16      // entries of one directory a change may hand its requester
	cacheRecallWait        = time.Second
)

type recentChange struct{ gen, ino uint64 }

// cacheSession is one client's cache at the MDS.
type cacheSession struct {
	id, epoch  uint64
	seen       time.Time // when its newest CacheWait arrived
	seq, acked uint64    // invalidations queued, and acknowledged
	queue      []mdsproto.Invalidation
	wake       chan struct{} // closed when an invalidation is queued
	acks       chan struct{} // closed when acked advances or the session ends
	inos       map[uint64]struct{}
	gone       bool // evicted or expired: its epoch is over
}

func newCacheTable(lease time.Duration, incarnation uint64) *cacheTable {
	return &cacheTable{lease: lease, epochBase: incarnation << 32, sessions: map[uint64]*cacheSession{},
		holders: map[uint64]map[uint64]*cacheSession{}, changing: map[uint64]int{}, sessionsMax: maxCacheSessions,
		claims: map[uint64]*dirClaim{}}
}

// grace starts the wait of a restarted process: nothing is granted or
// changed until every client of the previous one has let its cache go:
// until now+lease+extra (extra: Config.TakeoverGrace, for clocks that run
// at other rates).
func (t *cacheTable) grace(now time.Time, extra time.Duration) {
	t.mu.Lock()
	t.graceUntil = now.Add(t.lease + extra)
	t.mu.Unlock()
}

// waitResult is what a CacheWait gets at once.
type waitResult struct {
	epoch uint64
	invs  []mdsproto.Invalidation
	wake  <-chan struct{}
}

// wait takes a session's CacheWait: it applies the acknowledgement, renews the lease, and returns what is queued (a session that
// is new, or whose epoch the client does not hold, starts a new epoch).
func (t *cacheTable) wait(now time.Time, req mdsproto.CacheWaitReq) (waitResult, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[req.Session]
	if s != nil && req.Epoch != s.epoch {
		t.endLocked(s) // the client dropped its cache: start again
		s = nil
	}
	if s == nil {
		if len(t.sessions) >= t.sessionsMax {
			return waitResult{}, false
		}
		t.nextEpoch++
		s = &cacheSession{id: req.Session, epoch: t.epochBase | t.nextEpoch&0xffffffff, inos: map[uint64]struct{}{},
			wake: make(chan struct{}), acks: make(chan struct{})}
		t.sessions[s.id] = s
	} else if req.Acked > s.acked {
		t.ackLocked(s, min(req.Acked, s.seq))
	}
	s.seen = now
	return waitResult{epoch: s.epoch, invs: append([]mdsproto.Invalidation(nil), s.queue...), wake: s.wake}, true
}

// waited ends a CacheWait that was held: what is queued by now.
func (t *cacheTable) waited(id, epoch uint64) (uint64, []mdsproto.Invalidation) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if s == nil || s.epoch != epoch {
		return 0, nil // evicted meanwhile: the client learns it from the epoch
	}
	return s.epoch, append([]mdsproto.Invalidation(nil), s.queue...)
}

func (t *cacheTable) ackLocked(s *cacheSession, acked uint64) {
	s.acked = acked
	i := 0
	for i < len(s.queue) && s.queue[i].Seq <= acked {
		i++
	}
	s.queue = append(s.queue[:0], s.queue[i:]...)
	close(s.acks)
	s.acks = make(chan struct{})
}

// begin returns the change counter a reader notes before it reads.
func (t *cacheTable) begin() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gen
}

// grant registers session id (at epoch) on inos if what a reader read
// since gen may be cached, and returns the newest invalidation queued to
// the session before the grant.
func (t *cacheTable) grant(now time.Time, id, epoch, gen uint64, inos ...uint64) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if t.noGrants || s == nil || s.epoch != epoch || s.gone || !now.Before(s.seen.Add(t.lease)) || now.Before(t.graceUntil) {
		return 0, false
	}
	for _, ino := range inos {
		if t.changing[ino] > 0 || t.changedSinceLocked(ino, gen) {
			return 0, false
		}
		if c := t.claims[ino]; c != nil && c.holder != id {
			return 0, false // the holder answers for it
		}
	}
	for _, ino := range inos {
		if _, ok := s.inos[ino]; ok {
			continue
		}
		if len(s.inos) >= maxSessionRegistration || t.registered >= maxRegistrations {
			return 0, false
		}
		t.registerLocked(s, ino)
	}
	return s.seq, true
}

func (t *cacheTable) registerLocked(s *cacheSession, ino uint64) {
	s.inos[ino] = struct{}{}
	h := t.holders[ino]
	if h == nil {
		h = map[uint64]*cacheSession{}
		t.holders[ino] = h
	}
	h[s.id] = s
	t.registered++
}

func (t *cacheTable) changedSinceLocked(ino, gen uint64) bool {
	if t.gen-gen >= recentChanges {
		return t.gen != gen
	}
	for g := gen + 1; g <= t.gen; g++ {
		if t.recent[g%recentChanges].ino == ino {
			return true
		}
	}
	return false
}

func (t *cacheTable) unregisterLocked(s *cacheSession, ino uint64) {
	if _, ok := s.inos[ino]; !ok {
		return
	}
	delete(s.inos, ino)
	t.registered--
	if h := t.holders[ino]; h != nil {
		delete(h, s.id)
		if len(h) == 0 {
			delete(t.holders, ino)
		}
	}
}

// endLocked ends a session's epoch: its registrations go, and whoever
// waits for its acknowledgement stops waiting for it.
func (t *cacheTable) endLocked(s *cacheSession) {
	for ino := range s.inos {
		t.unregisterLocked(s, ino)
	}
	s.gone = true
	close(s.acks)
	s.acks = make(chan struct{})
	if t.sessions[s.id] == s {
		delete(t.sessions, s.id)
	}
}

// change is one change's view of the table: what it marked as changing
// (no grant of those until it ends) and the acknowledgements it waits for.
type change struct {
	marked map[uint64]bool
	waits  []ackWait
	// The requester's session, and what its last run granted it again
	// as committed (cacheTable.regrant).
	requester uint64
	self      map[uint64]bool
	selfSeq   uint64
	selfEpoch uint64
	// recalledAt is, per inode recalled from the requester, that recall's
	// sequence number and the change counter then: if no other change
	// began on the inode since, the requester may keep its entries.
	recalledAt map[uint64][2]uint64
	kept       map[uint64]uint64 // what regrant found kept, with the recall's seq
	// noSelfWait: the change is a claim holder's flush, sent while its
	// client holds back acknowledgements until the flush is done; what it
	// recalls from the requester is queued, not waited for.
	noSelfWait bool
}

type ackWait struct {
	s   *cacheSession
	seq uint64
}

func newChange(requester uint64) *change {
	return &change{marked: map[uint64]bool{}, requester: requester}
}

// cover marks the inodes a transaction touched as changing (no grant of
// them until the change ends) and recalls them from their holders. It
// reports whether the change must wait for acknowledgements before it
// commits (the transaction is then rolled back and run again after
// them), and whether the table is in its grace (nothing may change yet).
func (t *cacheTable) cover(now time.Time, c *change, touched map[uint64]*touched) (mustWait, inGrace bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.graceUntil) {
		return false, true
	}
	for ino := range touched {
		if !c.marked[ino] {
			c.marked[ino] = true
			t.changing[ino]++
			t.gen++
			t.recent[t.gen%recentChanges] = recentChange{gen: t.gen, ino: ino}
		}
		for _, s := range t.holders[ino] {
			if _, done := c.recalledAt[ino]; done && s.id == c.requester {
				continue // the requester stays registered: recalled once is enough
			}
			t.recallLocked(c, s, ino)
		}
	}
	// Every wait counts, not only those queued now: an engine may run a
	// transaction again on its own (the group committer reruns a failed
	// member alone), and that run must not commit before them either.
	_, _, mustWait = t.pendingLocked(now, c)
	if !mustWait {
		t.regrantLocked(now, c, touched)
	}
	return mustWait, false
}

// regrantLocked registers the requester again on what the change writes
// and no other change has in flight: the answer carries it as committed
// (mdsproto.CacheSelf), so the requester's cache holds its own change
// without asking. Deleted inodes stay recalled.
func (t *cacheTable) regrantLocked(now time.Time, c *change, touched map[uint64]*touched) {
	c.self, c.kept = nil, nil
	s := t.sessions[c.requester]
	if t.noGrants || s == nil || s.gone {
		return
	}
	for ino, tc := range touched {
		if tc.deleted {
			t.unregisterLocked(s, ino) // it stayed registered through its recall
		}
	}
	if !now.Before(s.seen.Add(t.lease)) || now.Before(t.graceUntil) {
		return
	}
	for ino, tc := range touched {
		if tc.rec == nil || t.changing[ino] != 1 || len(tc.entries) > maxSelfEntries {
			continue
		}
		if _, ok := s.inos[ino]; !ok {
			if len(s.inos) >= maxSessionRegistration || t.registered >= maxRegistrations {
				continue
			}
			t.registerLocked(s, ino)
		}
		if c.self == nil {
			c.self = map[uint64]bool{}
		}
		c.self[ino] = true
		if at, ok := c.recalledAt[ino]; ok && !t.changedSinceLocked(ino, at[1]) {
			if c.kept == nil {
				c.kept = map[uint64]uint64{}
			}
			c.kept[ino] = at[0]
		}
	}
	c.selfSeq, c.selfEpoch = s.seq, s.epoch
}

// recallLocked ends s's registration on ino, queues the recall and notes
// the acknowledgement c waits for. A holder whose queue is full is
// evicted instead. The requester of the change stays registered: a
// change by another client while this one runs is reported to it too (a
// mount that lets its kernel keep names relies on that), and its answer
// registers it again anyway.
func (t *cacheTable) recallLocked(c *change, s *cacheSession, ino uint64) {
	if len(s.queue) >= maxQueuedInvalidations {
		t.evictLocked(c, s)
		return
	}
	if s.id != c.requester {
		t.unregisterLocked(s, ino)
	}
	s.seq++
	inv := mdsproto.Invalidation{Seq: s.seq, Ino: ino}
	if s.id == c.requester {
		inv.Self = true
		if c.recalledAt == nil {
			c.recalledAt = map[uint64][2]uint64{}
		}
		c.recalledAt[ino] = [2]uint64{s.seq, t.gen}
	}
	s.queue = append(s.queue, inv)
	close(s.wake)
	s.wake = make(chan struct{})
	if s.id == c.requester && c.noSelfWait {
		return
	}
	c.waits = append(c.waits, ackWait{s: s, seq: s.seq})
}

// evictLocked ends a session that did not keep up; c waits for its lease.
func (t *cacheTable) evictLocked(c *change, s *cacheSession) {
	if !s.gone {
		t.endLocked(s)
	}
	c.waits = append(c.waits, ackWait{s: s, seq: ^uint64(0)})
}

// pending returns the first acknowledgement c still waits for: the
// channel that tells when it may have come or, for an evicted session,
// when its lease ends (acks nil).
func (t *cacheTable) pending(now time.Time, c *change) (acks <-chan struct{}, leaseEnd time.Time, waiting bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pendingLocked(now, c)
}

func (t *cacheTable) pendingLocked(now time.Time, c *change) (acks <-chan struct{}, leaseEnd time.Time, waiting bool) {
	for len(c.waits) > 0 {
		w := c.waits[0]
		if !w.s.gone && w.s.acked >= w.seq {
			c.waits = c.waits[1:]
			continue
		}
		if w.s.gone {
			end := w.s.seen.Add(t.lease)
			if !now.Before(end) {
				c.waits = c.waits[1:]
				continue
			}
			return nil, end, true
		}
		return w.s.acks, time.Time{}, true
	}
	return nil, time.Time{}, false
}

// graceEnd is when a restarted process's grace ends.
func (t *cacheTable) graceEnd() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.graceUntil
}

// evictLaggards ends every session c still waits for.
func (t *cacheTable) evictLaggards(c *change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, w := range c.waits {
		if !w.s.gone && w.s.acked < w.seq {
			t.endLocked(w.s)
			c.waits[i].seq = ^uint64(0)
		}
	}
}

// end lets grants of what c changed go out again.
//
// The end counts as a change begun, for readers: one that began before
// it may have read the state before the commit.
func (t *cacheTable) end(c *change) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ino := range c.marked {
		if t.changing[ino]--; t.changing[ino] <= 0 {
			delete(t.changing, ino)
		}
		t.gen++
		t.recent[t.gen%recentChanges] = recentChange{gen: t.gen, ino: ino}
	}
}

// expire ends sessions silent for more than a lease (their clients have
// stopped trusting their caches) and reports whether none is left and
// none has been for a lease (the store's mark may then go).
func (t *cacheTable) expire(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sessions {
		if now.Sub(s.seen) > t.lease {
			t.endLocked(s)
		}
	}
	if len(t.sessions) > 0 {
		t.emptySince = time.Time{}
		return false
	}
	if t.emptySince.IsZero() {
		t.emptySince = now
	}
	return now.Sub(t.emptySince) >= t.lease && !now.Before(t.graceUntil)
}

// stats is what status shows of the table.
func (t *cacheTable) stats() (sessions, registered int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions), t.registered
}
