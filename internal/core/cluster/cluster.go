// Package cluster judges the OSDs: which are up, down or out, from how
// long each has been silent (Sigma's and Panasas's failure detection by
// heartbeat). The MDS's cluster map (internal/mds/cluster.go) is the
// shell: it keeps each OSD's record and last heartbeat and asks
// Liveness what they mean.
//
// Up: heard within DownAfter; clients read around an OSD that is not.
// Out: silent past OutAfter; its components are rebuilt elsewhere.
// Down: between. An OSD not heard since this process started counts from
// the start, so a restarted MDS does not find every OSD down (and send
// clients around all of them) before the first heartbeats arrive.
//
// With several MDS processes, only the leader hears heartbeats; the
// others judge by the map it publishes (adopted at AdoptedAt). A copy of
// that map may be StaleAfter old, so they allow that much more silence
// before judging an OSD down (never finding one down the leader would
// not). Past StaleAfter the leader has fallen silent: its view is held
// as it was then, for at most MaxMapHold, rather than every OSD decaying
// to down on every process while a successor takes over. A process that
// takes the lead counts every OSD up in the adopted view as heard now
// (UpWhenAdopted), so each has the down timeout to heartbeat to it.
package cluster

import (
	"fmt"
	"time"

	"github.com/braidfs/braid/internal/invariants"
)

// An OSD's state as judged.
const (
	StateUp   = "up"   // heartbeating
	StateDown = "down" // silent past the down timeout: clients read around it
	StateOut  = "out"  // silent past the out grace period: its data is rebuilt elsewhere
)

// MaxMapHold bounds how long a stale OSD map's view is held: past any
// successor's takeover (its predecessor's session lease, then a
// publication).
const MaxMapHold = time.Minute

// View is one OSD's state as placement and repair planning see it.
type View struct {
	State string
	Drain bool
}

// Liveness judges OSDs by their silence.
type Liveness struct {
	DownAfter, OutAfter time.Duration
	// Started is when this process began counting.
	Started time.Time
	// AdoptedAt is when this process read the last map the leader
	// published; zero while it judges by heartbeats it takes itself.
	AdoptedAt time.Time
	// StaleAfter is how old an adopted map may be (publications a
	// period apart, read a refresh apart).
	StaleAfter time.Duration
}

// JudgedAt is the time OSD states are judged at, for a judgement made
// now: now, or, while an adopted map is stale, when it went stale. A
// hold ends after MaxMapHold: a leader that lives but cannot publish
// that long is no successor's takeover, and the OSDs' silence counts on.
func (l *Liveness) JudgedAt(now time.Time) time.Time {
	if l.AdoptedAt.IsZero() {
		return now
	}
	stale := l.AdoptedAt.Add(l.StaleAfter)
	switch {
	case now.Before(stale):
		return now
	case now.Before(stale.Add(MaxMapHold)):
		return stale
	}
	return now.Add(-MaxMapHold)
}

// Up reports whether an OSD last heard at lastSeen (zero: never) is up
// now.
func (l *Liveness) Up(lastSeen, now time.Time) bool {
	return l.upAt(lastSeen, l.JudgedAt(now))
}

func (l *Liveness) upAt(lastSeen, judged time.Time) bool {
	return judged.Sub(l.since(lastSeen)) <= l.DownAfter+l.lagAllowed()
}

// since is when an OSD's silence counts from.
func (l *Liveness) since(lastSeen time.Time) time.Time {
	if lastSeen.Before(l.Started) {
		return l.Started
	}
	return lastSeen
}

// lagAllowed is how much longer than the down timeout an OSD's silence
// may run before this process judges it down: nothing for the process
// hearing the heartbeats; for one judging by the leader's map, how stale
// that map may be.
func (l *Liveness) lagAllowed() time.Duration {
	if l.AdoptedAt.IsZero() {
		return 0
	}
	return l.StaleAfter
}

// State classifies an OSD last heard at lastSeen.
func (l *Liveness) State(lastSeen, now time.Time) string {
	judged := l.JudgedAt(now)
	st := StateDown
	switch {
	case l.upAt(lastSeen, judged):
		st = StateUp
	case judged.Sub(l.since(lastSeen)) > l.OutAfter:
		st = StateOut
	}
	if invariants.Enabled {
		invariants.Must(l.check(lastSeen, judged, st))
	}
	return st
}

// UpWhenAdopted reports whether an OSD last heard at lastSeen was up in
// the adopted map's view, as its leader judged: no allowance for a
// copy's staleness, so an OSD it published down stays down.
func (l *Liveness) UpWhenAdopted(lastSeen time.Time) bool {
	return !l.AdoptedAt.IsZero() && l.AdoptedAt.Sub(l.since(lastSeen)) <= l.DownAfter
}

// check: the timeouts are ordered, and a state follows from the silence:
// up within the down timeout (plus lag), out only past the out timeout.
func (l *Liveness) check(lastSeen, judged time.Time, st string) error {
	if l.DownAfter <= 0 || l.OutAfter < l.DownAfter || l.StaleAfter < 0 {
		return fmt.Errorf("liveness timeouts down %v, out %v, stale %v", l.DownAfter, l.OutAfter, l.StaleAfter)
	}
	silent := judged.Sub(l.since(lastSeen))
	switch {
	case st == StateUp && silent > l.DownAfter+l.lagAllowed():
		return fmt.Errorf("up after %v silent", silent)
	case st == StateOut && silent <= l.OutAfter:
		return fmt.Errorf("out after %v silent, out timeout %v", silent, l.OutAfter)
	}
	return nil
}
