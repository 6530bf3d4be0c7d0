package mds

import (
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
)

// Write-back claims (mdsproto/claim.go for the protocol). A claim gives
// one caching session a directory to itself: the holder answers creates
// and unlinks in it from memory and flushes them in batches, so the MDS
// must keep everyone else from seeing the directory as the store has it
// while the holder may have answered more. So every read or change of the
// directory's record, times or entries by anyone but the holder (the
// gate: claim_ops.go) first recalls the claim and waits until the holder
// has flushed and released it (DirFlush with Release), or until the
// recall's deadline, after which the claim is taken away: its stored
// record goes first, so a late flush of the holder's finds no claim and
// is refused, never applied over what others did since.
//
// Claims are only of directories their holder made and claimed while
// empty, and end at the first recall, so no one else ever learnt an
// inode number in a claimed directory: reads by inode number need no
// gate. The claim is stored ('w' key, claimRec) from before it is
// granted until its release; a restarted process loads the stored
// claims already recalled, so what a holder acknowledged to the previous
// process reaches the store before anyone reads the directory.
type dirClaim struct {
	dir, holder, id uint64
	s               *cacheSession // the holder's session here when granted (nil: loaded from the store)
	recalled        bool
	deadline        time.Time     // once recalled: when it may be taken away
	ended           chan struct{} // closed when the claim ends
}

// claimRecallDeadline is how long a recalled holder has to flush and
// release: the recall wait and a lease (it may be between CacheWaits).
func (t *cacheTable) claimRecallDeadline(now time.Time) time.Time {
	return now.Add(cacheRecallWait + t.lease)
}

// grantClaim gives dir to session id (at epoch) if no one else has it
// cached or claimed and nothing changed it since gen, when the caller
// began reading it.
func (t *cacheTable) grantClaim(now time.Time, id, epoch, gen, dir, claimID uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sessions[id]
	if t.noGrants || s == nil || s.epoch != epoch || s.gone || !now.Before(s.seen.Add(t.lease)) || now.Before(t.graceUntil) {
		return false
	}
	if t.claims[dir] != nil || t.changing[dir] > 0 || t.changedSinceLocked(dir, gen) || len(t.claims) >= maxClaims {
		return false
	}
	for holder := range t.holders[dir] {
		if holder != id {
			return false
		}
	}
	t.claims[dir] = &dirClaim{dir: dir, holder: id, id: claimID, s: s, ended: make(chan struct{})}
	t.nClaims.Add(1)
	// A change for readers: one that read dir before the claim and asks
	// a grant of it after gets none (cacheTable.grant), so no cache holds
	// it as the store has it while the holder answers for it.
	t.gen++
	t.recent[t.gen%recentChanges] = recentChange{gen: t.gen, ino: dir}
	return true
}

// loadClaim takes a claim found in the store at start, already
// recalled: it ends when its holder flushes and releases it, or is taken
// away after the grace and a recall's deadline.
func (t *cacheTable) loadClaim(now time.Time, dir, holder, claimID uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.claims[dir] != nil {
		return
	}
	start := now
	if t.graceUntil.After(start) {
		start = t.graceUntil
	}
	t.claims[dir] = &dirClaim{dir: dir, holder: holder, id: claimID, recalled: true,
		deadline: t.claimRecallDeadline(start), ended: make(chan struct{})}
	t.nClaims.Add(1)
}

// holds reports whether holder holds claim claimID on dir.
func (t *cacheTable) holds(dir, holder, claimID uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.claims[dir]
	return c != nil && c.holder == holder && c.id == claimID
}

// claimBlocks reports whether dir is claimed by a session other than me.
func (t *cacheTable) claimBlocks(me, dir uint64) bool {
	if t.nClaims.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.claims[dir]
	return c != nil && c.holder != me
}

// recallClaim recalls the claim on dir (once) and returns what to wait
// on: its end, until its deadline. ok is false if dir is not claimed.
func (t *cacheTable) recallClaim(now time.Time, dir uint64) (ended <-chan struct{}, deadline time.Time, claimID uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.claims[dir]
	if c == nil {
		return nil, time.Time{}, 0, false
	}
	if !c.recalled {
		c.recalled = true
		c.deadline = t.claimRecallDeadline(now)
		// To the holder's session as it is now: a session that started a
		// new epoch since the grant is the same client, which releases
		// what it holds when it meets the recall.
		if s := t.sessions[c.holder]; s != nil && !s.gone {
			if len(s.queue) < maxQueuedInvalidations {
				s.seq++
				s.queue = append(s.queue, mdsproto.Invalidation{Seq: s.seq, Ino: dir, Claim: true})
				close(s.wake)
				s.wake = make(chan struct{})
			}
		}
	}
	return c.ended, c.deadline, c.id, true
}

// endClaim ends claim claimID on dir, if it is still the one there.
func (t *cacheTable) endClaim(dir, claimID uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.claims[dir]; c != nil && c.id == claimID {
		close(c.ended)
		delete(t.claims, dir)
		t.nClaims.Add(-1)
	}
}

// overdue returns the claims whose holders are silent past their
// deadline, to be taken away (Server.expireClaims): a claim nobody reads
// would otherwise stay, and every gated read pay for it.
func (t *cacheTable) overdue(now time.Time) map[uint64]uint64 {
	if t.nClaims.Load() == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[uint64]uint64
	for dir, c := range t.claims {
		due := c.recalled && now.After(c.deadline)
		if s := t.sessions[c.holder]; !c.recalled && (s == nil || s.gone) {
			due = c.s == nil || now.After(c.s.seen.Add(t.lease+cacheRecallWait))
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

// maxClaims bounds the claims a process holds for all sessions.
const maxClaims = 1 << 16
