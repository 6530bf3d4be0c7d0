package cache

import "time"

// MaxClaims bounds the claims a process holds for all sessions.
const MaxClaims = 1 << 16

// claim is one directory's write-back claim.
type claim struct {
	dir, holder, id uint64
	s               *session // the holder's session here when granted (nil: loaded from the store)
	recalled        bool
	deadline        time.Time // once recalled: when it may be taken away
}

// claimRecallDeadline is how long a recalled holder has to flush and
// release: the recall wait and a lease (it may be between CacheWaits).
func (t *Table) claimRecallDeadline(now time.Time) time.Time {
	return now.Add(RecallWait + t.lease)
}

// Claims is how many claims are held.
func (t *Table) Claims() int { return len(t.claims) }

// GrantClaim gives dir to session id (at epoch) if no one else has it
// cached or claimed and nothing changed it since gen, when the caller
// began reading it.
func (t *Table) GrantClaim(now time.Time, id, epoch, gen, dir, claimID uint64) bool {
	defer t.done()
	s := t.sessions[id]
	if !t.mayGrant(now, s, epoch) {
		return false
	}
	if t.claims[dir] != nil || t.changing[dir] > 0 || t.changedSince(dir, gen) || len(t.claims) >= MaxClaims {
		return false
	}
	for holder := range t.holders[dir] {
		if holder != id {
			return false
		}
	}
	t.claims[dir] = &claim{dir: dir, holder: id, id: claimID, s: s}
	// A change for readers: one that read dir before the claim and asks
	// a grant of it after gets none (Grant), so no cache holds it as the
	// store has it while the holder answers for it.
	t.noteChange(dir)
	return true
}

// LoadClaim takes a claim found in the store at start, already
// recalled: it ends when its holder flushes and releases it, or is taken
// away after the grace and a recall's deadline.
func (t *Table) LoadClaim(now time.Time, dir, holder, claimID uint64) {
	defer t.done()
	if t.claims[dir] != nil {
		return // (not bounded: a stored claim must hold readers back)
	}
	start := now
	if t.graceUntil.After(start) {
		start = t.graceUntil
	}
	t.claims[dir] = &claim{dir: dir, holder: holder, id: claimID, recalled: true, deadline: t.claimRecallDeadline(start)}
}

// Holds reports whether holder holds claim claimID on dir.
func (t *Table) Holds(dir, holder, claimID uint64) bool {
	c := t.claims[dir]
	return c != nil && c.holder == holder && c.id == claimID
}

// ClaimBlocks reports whether dir is claimed by a session other than me.
func (t *Table) ClaimBlocks(me, dir uint64) bool {
	c := t.claims[dir]
	return c != nil && c.holder != me
}

// RecallClaim recalls the claim on dir (once) and says until when to
// wait for it to end (Effects.ClaimsEnded names dir when it does). ok is
// false if dir is not claimed.
func (t *Table) RecallClaim(now time.Time, dir uint64) (deadline time.Time, claimID uint64, ok bool) {
	defer t.done()
	c := t.claims[dir]
	if c == nil {
		return time.Time{}, 0, false
	}
	if !c.recalled {
		c.recalled = true
		c.deadline = t.claimRecallDeadline(now)
		// To the holder's session as it is now: a session that started a
		// new epoch since the grant is the same client, which releases
		// what it holds when it meets the recall.
		if s := t.sessions[c.holder]; s != nil && !s.gone && len(s.queue) < maxQueuedInvalidations {
			s.seq++
			s.queue = append(s.queue, Invalidation{Seq: s.seq, Ino: dir, Claim: true})
			t.out.Woken = addOnce(t.out.Woken, s.id)
		}
	}
	return c.deadline, c.id, true
}

// EndClaim ends claim claimID on dir, if it is still the one there.
func (t *Table) EndClaim(dir, claimID uint64) {
	defer t.done()
	if c := t.claims[dir]; c != nil && c.id == claimID {
		delete(t.claims, dir)
		t.out.ClaimsEnded = addOnce(t.out.ClaimsEnded, dir)
	}
}

// Overdue returns the claims whose holders are silent past their
// deadline, to be taken away: a claim nobody reads would otherwise stay,
// and every gated read pay for it.
func (t *Table) Overdue(now time.Time) map[uint64]uint64 {
	var out map[uint64]uint64
	for dir, c := range t.claims {
		due := c.recalled && now.After(c.deadline)
		if s := t.sessions[c.holder]; !c.recalled && (s == nil || s.gone) {
			due = c.s == nil || now.After(c.s.seen.Add(t.lease+RecallWait))
		}
		if due {
			if out == nil {
				out = map[uint64]uint64{}
			}
			out[dir] = c.id
		}
	}
	return out
}
