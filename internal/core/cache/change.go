package cache

import (
	"maps"
	"slices"
	"time"
)

// Change is one change's view of the table: what it marked as changing
// (no grant of those until it ends) and the acknowledgements it waits for.
type Change struct {
	marked map[uint64]bool
	waits  []ackWait
	// The requester's session, and what its last run granted it again
	// as committed (regrant).
	requester uint64
	// Self are the inodes the answer hands the requester as committed;
	// SelfSeq and SelfEpoch the grant's.
	Self      map[uint64]bool
	SelfSeq   uint64
	SelfEpoch uint64
	// recalledAt is, per inode recalled from the requester, that recall's
	// sequence number and the change counter then: if no other change
	// began on the inode since, the requester may keep its entries.
	recalledAt map[uint64][2]uint64
	// Kept is what regrant found kept, with the recall's seq.
	Kept map[uint64]uint64
	// noSelfWait: the change is a claim holder's flush, sent while its
	// client holds back acknowledgements until the flush is done; what it
	// recalls from the requester is queued, not waited for.
	noSelfWait bool
}

type ackWait struct {
	s   *session
	seq uint64
}

// NewChange begins a change asked for by session requester (0: none);
// noSelfWait marks a claim holder's flush.
func NewChange(requester uint64, noSelfWait bool) *Change {
	return &Change{marked: map[uint64]bool{}, requester: requester, noSelfWait: noSelfWait}
}

// Cover marks the inodes a transaction touched as changing (no grant of
// them until the change ends) and recalls them from their holders. It
// reports whether the change must wait for acknowledgements before it
// commits (the transaction is then rolled back and run again after
// them), and whether the table is in its grace (nothing may change yet).
func (t *Table) Cover(now time.Time, c *Change, touched map[uint64]Touched) (mustWait, inGrace bool) {
	defer t.done()
	if now.Before(t.graceUntil) {
		return false, true
	}
	for _, ino := range slices.Sorted(maps.Keys(touched)) { // in order: a replay queues the same
		if !c.marked[ino] {
			c.marked[ino] = true
			t.changing[ino]++
			t.noteChange(ino)
		}
		t.awaitOthers(c, ino)
		for _, id := range sortedIDs(t.holders[ino]) { // in order: a replay waits the same
			s := t.holders[ino][id]
			if _, done := c.recalledAt[ino]; done && s.id == c.requester {
				continue // the requester stays registered: recalled once is enough
			}
			t.recall(c, s, ino)
		}
	}
	// Every wait counts, not only those queued now: an engine may run a
	// transaction again on its own (the group committer reruns a failed
	// member alone), and that run must not commit before them either.
	_, _, mustWait = t.pending(now, c)
	if !mustWait {
		t.regrant(now, c, touched)
	}
	return mustWait, false
}

// regrant registers the requester again on what the change writes and
// no other change has in flight: the answer carries it as committed
// (mdsproto.CacheSelf), so the requester's cache holds its own change
// without asking. Deleted inodes stay recalled.
func (t *Table) regrant(now time.Time, c *Change, touched map[uint64]Touched) {
	c.Self, c.Kept = nil, nil
	s := t.sessions[c.requester]
	if t.NoGrants || s == nil || s.gone {
		return
	}
	for ino, tc := range touched {
		if tc.Deleted {
			t.unregister(s, ino) // it stayed registered through its recall
		}
	}
	if !now.Before(s.seen.Add(t.lease)) || now.Before(t.graceUntil) {
		return
	}
	for ino, tc := range touched {
		if !tc.Written || t.changing[ino] != 1 || tc.Entries > MaxSelfEntries {
			continue
		}
		if _, ok := s.inos[ino]; !ok {
			if len(s.inos) >= maxSessionRegistration || t.registered >= maxRegistrations {
				continue
			}
			t.register(s, ino)
		}
		if c.Self == nil {
			c.Self = map[uint64]bool{}
		}
		c.Self[ino] = true
		if at, ok := c.recalledAt[ino]; ok && !t.changedSince(ino, at[1]) {
			if c.Kept == nil {
				c.Kept = map[uint64]uint64{}
			}
			c.Kept[ino] = at[0]
		}
	}
	c.SelfSeq, c.SelfEpoch = s.seq, s.epoch
}

// recall ends s's registration on ino, queues the recall and notes the
// acknowledgement c waits for. A holder whose queue is full is evicted
// instead. The requester of the change stays registered: a change by
// another client while this one runs is reported to it too (a mount that
// lets its kernel keep names relies on that), and its answer registers
// it again anyway.
func (t *Table) recall(c *Change, s *session, ino uint64) {
	if len(s.queue) >= maxQueuedInvalidations {
		t.evict(c, s)
		return
	}
	if s.id != c.requester {
		t.unregister(s, ino)
	}
	s.seq++
	inv := Invalidation{Seq: s.seq, Ino: ino}
	if s.id == c.requester {
		inv.Self = true
		if c.recalledAt == nil {
			c.recalledAt = map[uint64][2]uint64{}
		}
		c.recalledAt[ino] = [2]uint64{s.seq, t.gen}
	}
	s.queue = append(s.queue, inv)
	t.out.Woken = addOnce(t.out.Woken, s.id)
	t.unacked[ino] = append(t.pruneUnacked(ino, time.Time{}), ackWait{s: s, seq: s.seq})
	if s.id == c.requester && c.noSelfWait {
		return
	}
	c.waits = append(c.waits, ackWait{s: s, seq: s.seq})
}

// awaitOthers makes c wait, too, for the recalls of ino that other
// changes sent and their sessions have not acknowledged: those sessions
// are no longer registered on ino (a recall ends the registration), yet
// until they apply the recall their caches hold ino as it was. Without
// this a second change of ino committed at once while the first waited,
// and a client served the state before both (found by the core
// simulation).
func (t *Table) awaitOthers(c *Change, ino uint64) {
	for _, w := range t.pruneUnacked(ino, time.Time{}) {
		if w.s.id == c.requester && c.noSelfWait {
			continue
		}
		if !slices.Contains(c.waits, w) {
			c.waits = append(c.waits, w)
		}
	}
}

// pruneUnacked drops from ino's unacknowledged recalls those applied,
// and those of ended sessions whose lease ran out by now (zero: keep
// every ended one), and returns what is left.
func (t *Table) pruneUnacked(ino uint64, now time.Time) []ackWait {
	ws := slices.DeleteFunc(t.unacked[ino], func(w ackWait) bool {
		if w.s.gone {
			return !now.IsZero() && !now.Before(w.s.seen.Add(t.lease))
		}
		return w.s.acked >= w.seq
	})
	if len(ws) == 0 {
		delete(t.unacked, ino)
		return nil
	}
	t.unacked[ino] = ws
	return ws
}

// evict ends a session that did not keep up; c waits for its lease.
func (t *Table) evict(c *Change, s *session) {
	if !s.gone {
		t.evictSession(s)
	}
	c.waits = append(c.waits, ackWait{s: s, seq: ^uint64(0)})
}

// evictSession ends a session that stopped answering. Its client does
// not know yet and trusts its cache to the end of its lease, so every
// inode it had cached is fenced until then: a later change of any of
// them waits for that lease, as the change that evicted it does (found
// by the core simulation: a change of another inode the evicted client
// cached committed at once).
func (t *Table) evictSession(s *session) {
	for ino := range s.inos {
		t.unacked[ino] = append(t.pruneUnacked(ino, time.Time{}), ackWait{s: s, seq: ^uint64(0)})
	}
	t.end(s)
}

// Pending returns the first acknowledgement c still waits for: the
// session whose acknowledgement it waits on (Effects.Acked names it when
// one may have come) or, for an evicted session, when its lease ends
// (session 0).
func (t *Table) Pending(now time.Time, c *Change) (session uint64, leaseEnd time.Time, waiting bool) {
	return t.pending(now, c)
}

func (t *Table) pending(now time.Time, c *Change) (session uint64, leaseEnd time.Time, waiting bool) {
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
			return 0, end, true
		}
		return w.s.id, time.Time{}, true
	}
	return 0, time.Time{}, false
}

// EvictLaggards ends every session c still waits for.
func (t *Table) EvictLaggards(c *Change) {
	defer t.done()
	for i, w := range c.waits {
		if !w.s.gone && w.s.acked < w.seq {
			t.evictSession(w.s)
			c.waits[i].seq = ^uint64(0)
		}
	}
}

// End lets grants of what c changed go out again.
//
// The end counts as a change begun, for readers: one that began before
// it may have read the state before the commit.
func (t *Table) End(c *Change) {
	defer t.done()
	for ino := range c.marked {
		if t.changing[ino]--; t.changing[ino] <= 0 {
			delete(t.changing, ino)
		}
		t.noteChange(ino)
	}
}

// sortedIDs are the sessions of a holder set, in order.
func sortedIDs(h map[uint64]*session) []uint64 {
	if len(h) == 1 {
		for id := range h {
			return []uint64{id}
		}
	}
	return slices.Sorted(maps.Keys(h))
}
