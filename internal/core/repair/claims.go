package repair

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/invariants"
)

// What a claim does to its file (the wire's mdsproto.RepairRebuild and
// RepairScrub).
const (
	KindRebuild = "rebuild" // write components from the others (or copy from their old OSD)
	KindScrub   = "scrub"   // verify every stripe; rewrite what disagrees
)

// Lease is how long a claimed file's repair lock holds: a dead healer's
// lock expires with it.
const Lease = 10 * time.Minute

// Claim is a file handed to a healer: when, at which layout version (a
// late report of an older claim must not end a newer one), why, and the
// MDS process the healer runs in ("": a healer of its own).
type Claim struct {
	At      time.Time
	Version uint64
	Kind    string
	Process string
	Why     string // what status says the repair is for
	Balance bool   // a move of a healthy component to even out OSDs
}

// Claims is the leader's book of files handed to healers: who holds
// which, which wait out a backoff after a failure, and which MDS
// processes left (their healers' claims are dead). It decides whether a
// file may be claimed, and whether a file's repair lock is a dead claim.
// The MDS keeps it under its heal mutex.
type Claims struct {
	active  map[uint64]Claim
	backoff map[uint64]time.Time // files not to claim before then
	// seen is the MDS processes active at the leader's last look, and
	// leftAt when each of those that left since was found gone: a claim
	// of a healer in a process that left after the claim is dead
	// (Dead). Both hold at most the processes of a routing table.
	seen   map[string]bool
	leftAt map[string]time.Time
	// claiming counts the claims of each file in flight (between the
	// transaction that writes the repair lock and Record): Dead must not
	// take such a lock, which has no entry yet, for one an earlier
	// leader handed out.
	claiming map[uint64]int
}

// NewClaims is an empty book.
func NewClaims() *Claims {
	return &Claims{active: map[uint64]Claim{}, backoff: map[uint64]time.Time{}}
}

// Claimable reports whether ino may be handed to a healer now: no live
// claim holds it and no backoff.
func (c *Claims) Claimable(ino uint64, now time.Time) bool {
	if cl, busy := c.active[ino]; busy && !c.Left(cl) {
		// (One whose process left stays until a new claim replaces it:
		// Dead judges the file's repair lock by it.)
		if now.Sub(cl.At) < Lease {
			return false
		}
		delete(c.active, ino) // its healer died: the repair lock has expired too
	}
	if t, ok := c.backoff[ino]; ok {
		if now.Before(t) {
			return false
		}
		delete(c.backoff, ino)
	}
	return true
}

// Record notes ino handed to a healer.
func (c *Claims) Record(ino uint64, cl Claim) {
	c.active[ino] = cl
	c.done()
}

// Get is ino's claim, if any.
func (c *Claims) Get(ino uint64) (Claim, bool) {
	cl, ok := c.active[ino]
	return cl, ok
}

// Done ends ino's claim at version (a report of an older claim ends
// nothing).
func (c *Claims) Done(ino, version uint64) {
	if cl, ok := c.active[ino]; ok && cl.Version == version {
		delete(c.active, ino)
	}
}

// Backoff keeps ino from being claimed before until.
func (c *Claims) Backoff(ino uint64, until time.Time) { c.backoff[ino] = until }

// NoteActives records the MDS processes the leader finds active now:
// those active at its last look and missing now left (their sessions
// lapsed: dead, or cut off from the engine and no longer serving). It
// returns the files whose scrub a healer of a process that left had
// claimed: nothing else would scrub them, so the caller queues them
// again (a rebuild's file stays dirty, and is found again). Their
// claims stay until the next one replaces them (Dead judges by them).
func (c *Claims) NoteActives(names []string, now time.Time) (requeue []uint64) {
	defer c.done()
	next := make(map[string]bool, len(names))
	for _, n := range names {
		next[n] = true
	}
	if c.leftAt == nil {
		c.leftAt = map[string]time.Time{}
	}
	for n := range c.seen {
		if next[n] {
			continue
		}
		c.leftAt[n] = now
		for ino, cl := range c.active {
			if cl.Process == n && cl.Kind == KindScrub && now.After(cl.At) {
				requeue = append(requeue, ino)
			}
		}
	}
	maps.DeleteFunc(c.leftAt, func(_ string, at time.Time) bool { return now.Sub(at) > Lease })
	c.seen = next
	slices.Sort(requeue)
	return requeue
}

// ForgetActives drops what a leader saw of the actives, when it no
// longer leads: a view from an earlier lead is stale (processes joined
// and claimed since).
func (c *Claims) ForgetActives() { c.seen, c.leftAt = nil, nil }

// Left reports whether cl's healer's process left the cluster after the
// claim, judged on the leader's clock alone.
func (c *Claims) Left(cl Claim) bool {
	at, ok := c.leftAt[cl.Process]
	return cl.Process != "" && ok && at.After(cl.At)
}

// Dead reports whether a repair lock on ino (at lockVersion, naming
// lockProcess) is a claim whose healer's process is gone. One this
// leader handed out (known at that version) is dead if the process left
// after it. One it did not (an earlier leader did, none in flight here
// but the caller's ownClaims) is dead if the process is not active at
// this leader's last look: the process held a session when its healer
// claimed (a process joins before it starts healers), so it has left
// since. Either way its healer died with it, or, cut off, is fenced by
// the next claim's layout version; a process back under its name keeps
// an inherited claim to its lease.
func (c *Claims) Dead(ino, lockVersion uint64, lockProcess string, ownClaims int) bool {
	if cl, known := c.active[ino]; known && cl.Version == lockVersion {
		return c.Left(cl)
	}
	return lockProcess != "" && c.seen != nil && !c.seen[lockProcess] && c.claiming[ino] <= ownClaims
}

// InFlight counts a claim of ino starting (+1) or done (-1).
func (c *Claims) InFlight(ino uint64, d int) {
	if c.claiming == nil {
		c.claiming = map[uint64]int{}
	}
	if c.claiming[ino] += d; c.claiming[ino] <= 0 {
		delete(c.claiming, ino)
	}
}

// ActiveKinds counts the files being worked on by what is done to them:
// rebuilt or caught up, scrubbed, moved to even out OSDs. A claim whose
// process left counts until the next claim of its file replaces it
// (`braid scrub` and drain wait for that); one past its lease is
// dropped.
func (c *Claims) ActiveKinds(now time.Time) (rebuild, scrub, balance int) {
	for ino, cl := range c.active {
		if now.Sub(cl.At) >= Lease {
			delete(c.active, ino)
			continue
		}
		switch {
		case cl.Kind == KindScrub:
			scrub++
		case cl.Balance:
			balance++
		default:
			rebuild++
		}
	}
	return rebuild, scrub, balance
}

func (c *Claims) done() {
	if invariants.Enabled {
		invariants.Must(c.check())
	}
}

// check: every claim names a kind and a version; counts in flight are
// positive; the processes' view is bounded.
func (c *Claims) check() error {
	if len(c.active) <= 1<<12 {
		for ino, cl := range c.active {
			if cl.Kind != KindRebuild && cl.Kind != KindScrub {
				return fmt.Errorf("claim of %d: kind %q", ino, cl.Kind)
			}
		}
	}
	for ino, n := range c.claiming {
		if n <= 0 {
			return fmt.Errorf("inode %d: %d claims in flight", ino, n)
		}
	}
	if len(c.seen) > 1<<10 || len(c.leftAt) > 1<<12 {
		return fmt.Errorf("%d processes seen, %d left", len(c.seen), len(c.leftAt))
	}
	return nil
}
