package mds

import (
	"encoding/binary"
	"sync"
	"time"
)

// Deadlines stored in the engine (a repair lock's lease, an intent's
// expiry, a removed file's delete delay, a retired key's end, an
// exactly-once record's keep) are stamped on the clock of the process
// that wrote them. With one MDS process that clock is the only one.
// With several sharing the engine (or a standby taking over) another
// process judges them, and comparing the stamp with its own clock would
// compare two machines' clocks: one running ahead would end a live
// repair, resolve a live intent, delete objects a capability may still
// read. Instead each such process counts a deadline's window on its own
// clock from when it first saw the record: never earlier than the
// deadline, later by however old the record was when first seen (a
// process that started or took the lead since sees its records anew):
// late, never unsafe.

// sights remembers when this process first saw each stamped record, and
// so when its deadline passes here.
type sights struct {
	shared  bool      // the engine is shared with other MDS processes (Config.LeadUntil set)
	started time.Time // when this process started (expiry)
	now     func() time.Time

	mu     sync.Mutex
	passAt map[sightID]time.Time // first sight + window
}

// sightID names one stamped record: what kind it is, its key, and its
// stamp (a new stamp on the same key is a new deadline).
type sightID struct {
	kind  byte
	key   string
	stamp int64
}

// Kinds of stamped record.
const (
	sightRepair  = 'r'
	sightIntent  = 'n'
	sightDelete  = 'g'
	sightKey     = 'k'
	sightOnce    = 's'
	maxSightKeys = 1 << 17 // records remembered; past it new ones are judged by their stamps
)

// passes is when the deadline of the record id, with window, passes
// here: window after this process first saw it. False when the table is
// full of records not yet due (a mass removal): the caller then judges
// by the stamp, as one process does, rather than hold deadlines back
// until the table drains.
func (t *sights) passes(id sightID, window time.Duration, now time.Time) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.passAt == nil {
		t.passAt = map[sightID]time.Time{}
	}
	if at, ok := t.passAt[id]; ok {
		return at, true
	}
	if len(t.passAt) >= maxSightKeys {
		for k, at := range t.passAt {
			if at.Before(now.Add(-maxSightWindow)) { // passed long ago: acted on, surely
				delete(t.passAt, k)
			}
		}
	}
	if len(t.passAt) >= maxSightKeys {
		return time.Time{}, false
	}
	at := now.Add(window)
	t.passAt[id] = at
	return at, true
}

// maxSightWindow is how long past its deadline a record is remembered
// when the table is full.
const maxSightWindow = time.Hour

// deadline is when a deadline stored in the engine (storedNs, set window
// ahead by the process that wrote it) passes for this process, in Unix
// nanoseconds: on one process's own store by the stamp (expiry); on a
// shared engine, window after this process first saw the record.
func (t *sights) deadline(kind byte, key []byte, storedNs int64, window time.Duration) int64 {
	if !t.shared {
		return t.expiry(storedNs, window)
	}
	at, ok := t.passes(sightID{kind: kind, key: string(key), stamp: storedNs}, window, t.now())
	if !ok {
		return t.expiry(storedNs, window)
	}
	return at.UnixNano()
}

// expiry is when a deadline stored in the engine passes for this
// process: never before window has passed on its own clock since it
// started. A deadline written by another MDS process (before a restart
// or a failover, perhaps on another machine's clock) can so only be late
// here, never early: expiry is never one machine's wall-clock time
// compared on another's.
func (t *sights) expiry(storedNs int64, window time.Duration) int64 {
	return max(storedNs, t.started.Add(window).UnixNano())
}

// repairActive reports whether the repair lock l on ino holds at now.
func (t *sights) repairActive(ino uint64, l *repairLock, now time.Time) bool {
	if l == nil {
		return false
	}
	if !t.shared {
		return l.active(now)
	}
	id := sightID{kind: sightRepair, key: string(binary.BigEndian.AppendUint64(nil, ino)), stamp: l.UntilNs}
	at, ok := t.passes(id, repairLease, now)
	if !ok {
		return l.active(now)
	}
	return now.Before(at)
}
