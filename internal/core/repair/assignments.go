package repair

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/invariants"
)

// What an assignment does to its file (the wire's mdsproto.RepairRebuild and
// RepairScrub).
const (
	KindRebuild = "rebuild" // write components from the others (or copy from their old OSD)
	KindScrub   = "scrub"   // verify every stripe; rewrite what disagrees
)

// Lease is how long an assigned file's repair lock holds: a dead worker's
// lock expires with it.
const Lease = 10 * time.Minute

// Assigned is a file handed to a worker: when, at which layout version (a
// late report of an older assignment must not end a newer one), why, and the
// MDS process the worker runs in ("": a worker of its own).
type Assigned struct {
	At      time.Time
	Version uint64
	Kind    string
	Process string
	Why     string // what status says the repair is for
	Balance bool   // a move of a healthy component to even out OSDs
}

// Assignments is the leader's book of files handed to repair workers: who holds
// which, which wait out a backoff after a failure, and which MDS
// processes left (their repair workers' assignments are dead). It decides whether a
// file may be assigned, and whether a file's repair lock is a dead assignment.
// The MDS keeps it under its repair mutex.
type Assignments struct {
	active  map[uint64]Assigned
	backoff map[uint64]time.Time // files not to assign before then
	// seen is the MDS processes active at the leader's last look, and
	// leftAt when each of those that left since was found gone: an assignment
	// of a worker in a process that left after the assignment is dead
	// (Dead). Both hold at most the processes of a routing table.
	seen   map[string]bool
	leftAt map[string]time.Time
	// assigning counts the assignments of each file in flight (between the
	// transaction that writes the repair lock and Record): Dead must not
	// take such a lock, which has no entry yet, for one an earlier
	// leader handed out.
	assigning map[uint64]int
}

// NewAssignments is an empty book.
func NewAssignments() *Assignments {
	return &Assignments{active: map[uint64]Assigned{}, backoff: map[uint64]time.Time{}}
}

// Assignable reports whether ino may be handed to a worker now: no live
// assignment holds it and no backoff.
func (c *Assignments) Assignable(ino uint64, now time.Time) bool {
	if cl, busy := c.active[ino]; busy && !c.Left(cl) {
		// (One whose process left stays until a new assignment replaces it:
		// Dead judges the file's repair lock by it.)
		if now.Sub(cl.At) < Lease {
			return false
		}
		delete(c.active, ino) // its worker died: the repair lock has expired too
	}
	if t, ok := c.backoff[ino]; ok {
		if now.Before(t) {
			return false
		}
		delete(c.backoff, ino)
	}
	return true
}

// Record notes ino handed to a worker.
func (c *Assignments) Record(ino uint64, cl Assigned) {
	c.active[ino] = cl
	c.done()
}

// Get is ino's assignment, if any.
func (c *Assignments) Get(ino uint64) (Assigned, bool) {
	cl, ok := c.active[ino]
	return cl, ok
}

// Done ends ino's assignment at version (a report of an older assignment ends
// nothing).
func (c *Assignments) Done(ino, version uint64) {
	if cl, ok := c.active[ino]; ok && cl.Version == version {
		delete(c.active, ino)
	}
}

// Backoff keeps ino from being assigned before until.
func (c *Assignments) Backoff(ino uint64, until time.Time) { c.backoff[ino] = until }

// NoteActives records the MDS processes the leader finds active now:
// those active at its last look and missing now left (their sessions
// lapsed: dead, or cut off from the engine and no longer serving). It
// returns the files whose scrub a worker of a process that left had
// assigned: nothing else would scrub them, so the caller queues them
// again (a rebuild's file stays dirty, and is found again). Their
// assignments stay until the next one replaces them (Dead judges by them).
func (c *Assignments) NoteActives(names []string, now time.Time) (requeue []uint64) {
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
// and assigned since).
func (c *Assignments) ForgetActives() { c.seen, c.leftAt = nil, nil }

// Left reports whether cl's worker's process left the cluster after the
// assignment, judged on the leader's clock alone.
func (c *Assignments) Left(cl Assigned) bool {
	at, ok := c.leftAt[cl.Process]
	return cl.Process != "" && ok && at.After(cl.At)
}

// Dead reports whether a repair lock on ino (at lockVersion, naming
// lockProcess) is an assignment whose worker's process is gone. One this
// leader handed out (known at that version) is dead if the process left
// after it. One it did not (an earlier leader did, none in flight here
// but the caller's ownAssigned) is dead if the process is not active at
// this leader's last look: the process held a session when its worker
// assigned (a process joins before it starts repair workers), so it has left
// since. Either way its worker died with it, or, cut off, is fenced by
// the next assignment's layout version; a process back under its name keeps
// an inherited assignment to its lease.
func (c *Assignments) Dead(ino, lockVersion uint64, lockProcess string, ownAssigned int) bool {
	if cl, known := c.active[ino]; known && cl.Version == lockVersion {
		return c.Left(cl)
	}
	return lockProcess != "" && c.seen != nil && !c.seen[lockProcess] && c.assigning[ino] <= ownAssigned
}

// InFlight counts an assignment of ino starting (+1) or done (-1).
func (c *Assignments) InFlight(ino uint64, d int) {
	if c.assigning == nil {
		c.assigning = map[uint64]int{}
	}
	if c.assigning[ino] += d; c.assigning[ino] <= 0 {
		delete(c.assigning, ino)
	}
}

// ActiveKinds counts the files being worked on by what is done to them:
// rebuilt or caught up, scrubbed, moved to even out OSDs. An assignment whose
// process left counts until the next assignment of its file replaces it
// (`braid scrub` and drain wait for that); one past its lease is
// dropped.
func (c *Assignments) ActiveKinds(now time.Time) (rebuild, scrub, balance int) {
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

func (c *Assignments) done() {
	if invariants.Enabled {
		invariants.Must(c.check())
	}
}

// check: every assignment names a kind and a version; counts in flight are
// positive; the processes' view is bounded.
func (c *Assignments) check() error {
	if len(c.active) <= 1<<12 {
		for ino, cl := range c.active {
			if cl.Kind != KindRebuild && cl.Kind != KindScrub {
				return fmt.Errorf("assignment of %d: kind %q", ino, cl.Kind)
			}
		}
	}
	for ino, n := range c.assigning {
		if n <= 0 {
			return fmt.Errorf("inode %d: %d assignments in flight", ino, n)
		}
	}
	if len(c.seen) > 1<<10 || len(c.leftAt) > 1<<12 {
		return fmt.Errorf("%d processes seen, %d left", len(c.seen), len(c.leftAt))
	}
	return nil
}
