package cache

import (
	"fmt"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/invariants"
)

// Bounds of the table.
const (
	recentChanges          = 1024    // changes a grant looks back over; older readers get no grant
	MaxSessions            = 4096    // sessions caching at once
	maxSessionRegistration = 1 << 18 // inodes one session may cache
	maxRegistrations       = 1 << 21 // inodes all sessions may cache
	maxQueuedInvalidations = 4096    // unacknowledged invalidations a session may have (all fit one answer: ~100 KB)
	MaxSelfEntries         = 16      // entries of one directory a change may hand its requester
	fullCheckMax           = 1 << 12 // check() walks the table only this small
	// RecallWait is how long a change waits for a session's
	// acknowledgement before it evicts the session.
	RecallWait = time.Second
)

// Invalidation recalls inode Ino from a caching session (as the wire
// carries it: mdsproto.Invalidation). Self marks a recall by a change
// the session asked for itself; Claim recalls the session's write-back
// claim on directory Ino.
type Invalidation struct {
	Seq  uint64 `json:"seq"`
	Ino  uint64 `json:"ino"`
	Self bool   `json:"self,omitempty"`
	// Claim recalls the session's write-back claim on directory Ino
	// (claim.go): it flushes what it holds and releases the claim.
	Claim bool `json:"claim,omitempty"`
}

// Touched is what a transaction wrote of one inode.
type Touched struct {
	Written bool // its record was written (not deleted)
	Deleted bool // its record was deleted
	Entries int  // directory entries written or removed
}

// Effects is what the caller must wake after decisions.
type Effects struct {
	// Woken: sessions an invalidation was queued for; their waiting
	// CacheWait answers now.
	Woken []uint64
	// Acked: sessions whose acknowledgements advanced or whose epoch
	// ended; the changes waiting on them look again.
	Acked []uint64
	// ClaimsEnded: directories whose claim ended; their gated readers
	// go on.
	ClaimsEnded []uint64
}

type recentChange struct{ gen, ino uint64 }

// session is one client's cache at the MDS.
type session struct {
	id, epoch  uint64
	seen       time.Time // when its newest CacheWait arrived
	seq, acked uint64    // invalidations queued, and acknowledged
	queue      []Invalidation
	inos       map[uint64]struct{}
	gone       bool // evicted or expired: its epoch is over
}

// Table holds who caches which inodes, the changes in flight and the
// claims.
type Table struct {
	lease      time.Duration
	epochBase  uint64 // the process's incarnation, high bits of every epoch
	nextEpoch  uint64
	sessions   map[uint64]*session
	holders    map[uint64]map[uint64]*session // ino → session id → session
	changing   map[uint64]int                 // ino → changes in flight
	gen        uint64                         // changes begun so far
	recent     [recentChanges]recentChange    // the newest changes begun, by gen
	registered int                            // registrations, all sessions
	graceUntil time.Time                      // nothing granted or changed before this
	// NoGrants: grant nothing, ever (several active processes).
	NoGrants    bool
	emptySince  time.Time // when the last session ended
	sessionsMax int
	claims      map[uint64]*claim // dir ino → its write-back claim (claim.go)
	// unacked are, per inode, the recalls sent and not yet applied: a
	// change of the inode waits for them whoever sent them (awaitOthers).
	unacked map[uint64][]ackWait
	out     Effects
}

// New is an empty table of caches leased for lease, for the process
// of incarnation.
func New(lease time.Duration, incarnation uint64) *Table {
	return &Table{lease: lease, epochBase: incarnation << 32, sessions: map[uint64]*session{},
		holders: map[uint64]map[uint64]*session{}, changing: map[uint64]int{}, sessionsMax: MaxSessions,
		claims: map[uint64]*claim{}, unacked: map[uint64][]ackWait{}}
}

// SetMaxSessions lowers the session bound (tests).
func (t *Table) SetMaxSessions(n int) { t.sessionsMax = n }

// TakeEffects returns what must be woken since the last call, in order.
func (t *Table) TakeEffects() Effects {
	e := t.out
	t.out = Effects{}
	slices.Sort(e.Woken)
	slices.Sort(e.Acked)
	slices.Sort(e.ClaimsEnded)
	return e
}

func addOnce(xs []uint64, x uint64) []uint64 {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

func (t *Table) done() {
	if invariants.Enabled {
		invariants.Must(t.check())
	}
}

// Grace starts the wait of a restarted process: nothing is granted or
// changed until every client of the previous one has let its cache go:
// until now+lease+extra (extra: for clocks that run at other rates).
func (t *Table) Grace(now time.Time, extra time.Duration) {
	t.graceUntil = now.Add(t.lease + extra)
}

// GraceEnd is when a restarted process's grace ends.
func (t *Table) GraceEnd() time.Time { return t.graceUntil }

// Wait takes a session's CacheWait: it applies the acknowledgement,
// renews the lease, and returns the session's epoch and what is queued
// (a session that is new, or whose epoch the client does not hold,
// starts a new epoch). ok is false when the table has no room.
func (t *Table) Wait(now time.Time, id, epoch, acked uint64) (uint64, []Invalidation, bool) {
	defer t.done()
	s := t.sessions[id]
	if s != nil && epoch != s.epoch {
		t.end(s) // the client dropped its cache: start again
		s = nil
	}
	if s == nil {
		if len(t.sessions) >= t.sessionsMax {
			return 0, nil, false
		}
		t.nextEpoch++
		s = &session{id: id, epoch: t.epochBase | t.nextEpoch&0xffffffff, inos: map[uint64]struct{}{}}
		t.sessions[s.id] = s
	} else if acked > s.acked {
		t.ack(s, min(acked, s.seq))
	}
	s.seen = now
	return s.epoch, slices.Clone(s.queue), true
}

// Waited ends a CacheWait that was held: what is queued by now.
func (t *Table) Waited(id, epoch uint64) (uint64, []Invalidation) {
	s := t.sessions[id]
	if s == nil || s.epoch != epoch {
		return 0, nil // evicted meanwhile: the client learns it from the epoch
	}
	return s.epoch, slices.Clone(s.queue)
}

func (t *Table) ack(s *session, acked uint64) {
	s.acked = acked
	i := 0
	for i < len(s.queue) && s.queue[i].Seq <= acked {
		i++
	}
	s.queue = append(s.queue[:0], s.queue[i:]...)
	t.out.Acked = addOnce(t.out.Acked, s.id)
}

// Begin returns the change counter a reader notes before it reads.
func (t *Table) Begin() uint64 { return t.gen }

// Grant registers session id (at epoch) on inos if what a reader read
// since gen may be cached, and returns the newest invalidation queued to
// the session before the grant.
func (t *Table) Grant(now time.Time, id, epoch, gen uint64, inos ...uint64) (uint64, bool) {
	defer t.done()
	s := t.sessions[id]
	if !t.mayGrant(now, s, epoch) {
		return 0, false
	}
	for _, ino := range inos {
		if t.changing[ino] > 0 || t.changedSince(ino, gen) {
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
		t.register(s, ino)
	}
	return s.seq, true
}

// mayGrant: grants are on, the session is the one at epoch, alive and
// within its lease, and the grace is over.
func (t *Table) mayGrant(now time.Time, s *session, epoch uint64) bool {
	return !t.NoGrants && s != nil && s.epoch == epoch && !s.gone && now.Before(s.seen.Add(t.lease)) && !now.Before(t.graceUntil)
}

func (t *Table) register(s *session, ino uint64) {
	s.inos[ino] = struct{}{}
	h := t.holders[ino]
	if h == nil {
		h = map[uint64]*session{}
		t.holders[ino] = h
	}
	h[s.id] = s
	t.registered++
}

func (t *Table) changedSince(ino, gen uint64) bool {
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

// noteChange counts a change begun (or ended) on ino, for readers.
func (t *Table) noteChange(ino uint64) {
	t.gen++
	t.recent[t.gen%recentChanges] = recentChange{gen: t.gen, ino: ino}
}

func (t *Table) unregister(s *session, ino uint64) {
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

// end ends a session's epoch: its registrations go, and whoever waits
// for its acknowledgement stops waiting for it.
func (t *Table) end(s *session) {
	for ino := range s.inos {
		t.unregister(s, ino)
	}
	s.gone = true
	t.out.Acked = addOnce(t.out.Acked, s.id)
	if t.sessions[s.id] == s {
		delete(t.sessions, s.id)
	}
}

// Expire ends sessions silent for more than a lease (their clients have
// stopped trusting their caches) and reports whether none is left and
// none has been for a lease (the store's mark may then go).
func (t *Table) Expire(now time.Time) bool {
	defer t.done()
	for _, s := range t.sessions {
		if now.Sub(s.seen) > t.lease {
			t.end(s)
		}
	}
	for ino := range t.unacked {
		t.pruneUnacked(ino, now)
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

// Stats is what status shows of the table.
func (t *Table) Stats() (sessions, registered int) { return len(t.sessions), t.registered }

// check: the registration count matches the sessions' inodes, and the
// holders index matches them both ways; every session is live and
// within its bounds; changes in flight are positive; claims are keyed by
// their directory.
func (t *Table) check() error {
	if t.registered+len(t.sessions) > fullCheckMax {
		return nil // the walk below would cost more than the decision
	}
	n := 0
	for id, s := range t.sessions {
		if s.gone || s.id != id {
			return fmt.Errorf("session %d: gone %v, id %d", id, s.gone, s.id)
		}
		if s.acked > s.seq || len(s.queue) > maxQueuedInvalidations || len(s.inos) > maxSessionRegistration {
			return fmt.Errorf("session %d: acked %d of %d, %d queued, %d inodes", id, s.acked, s.seq, len(s.queue), len(s.inos))
		}
		for _, inv := range s.queue {
			if inv.Seq <= s.acked || inv.Seq > s.seq {
				return fmt.Errorf("session %d: invalidation %d queued, acked %d of %d", id, inv.Seq, s.acked, s.seq)
			}
		}
		for ino := range s.inos {
			if t.holders[ino][id] != s {
				return fmt.Errorf("session %d caches inode %d, which does not list it", id, ino)
			}
		}
		n += len(s.inos)
	}
	if n != t.registered {
		return fmt.Errorf("registered %d, sessions cache %d", t.registered, n)
	}
	h := 0
	for ino, m := range t.holders {
		if len(m) == 0 {
			return fmt.Errorf("inode %d has an empty holder set", ino)
		}
		h += len(m)
	}
	if h != n {
		return fmt.Errorf("holders list %d registrations, sessions %d", h, n)
	}
	for ino, c := range t.changing {
		if c <= 0 {
			return fmt.Errorf("inode %d has %d changes in flight", ino, c)
		}
	}
	for dir, c := range t.claims {
		if c.dir != dir {
			return fmt.Errorf("claim of %d filed under %d", c.dir, dir)
		}
	}
	return nil
}
