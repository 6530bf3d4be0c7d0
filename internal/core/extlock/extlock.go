package extlock

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/invariants"
)

// Bounds on what the table holds.
const (
	MaxLocks         = 1 << 20 // granted ranges over all files
	MaxFiles         = 1 << 18 // files with locks or a size handed over
	MaxSessions      = 1 << 16 // client sessions holding locks or waiting
	MaxQueuedRecalls = 1 << 12 // per session
	// MaxMovedPerSession bounds the moved files a session is told of at once.
	MaxMovedPerSession = 4096
	fullCheckMax       = 1 << 12 // check() walks the table only this small
)

// MaxStripe stands for "every stripe from Lo on".
const MaxStripe int64 = 1 << 62

// Errors a decision may return.
var (
	// ErrNotInGrace: a reclaim after the grace, when others may hold the range.
	ErrNotInGrace = errors.New("not in the grace")
	// ErrFull: the table holds as many locks or sessions as it may.
	ErrFull = errors.New("the MDS holds as many extent locks as it may")
	// ErrTwoHolders: a reclaim of a range another handle holds.
	ErrTwoHolders = errors.New("reclaimed by two handles")
)

// Span is a range of stripes [Lo, Hi).
type Span struct{ Lo, Hi int64 }

// Overlaps reports whether a and b share a stripe.
func (a Span) Overlaps(b Span) bool { return a.Lo < b.Hi && b.Lo < a.Hi }

func (a Span) String() string {
	if a.Hi == MaxStripe {
		return fmt.Sprintf("[%d, max)", a.Lo)
	}
	return fmt.Sprintf("[%d, %d)", a.Lo, a.Hi)
}

// Recall asks a holder to give back part of a lock (as the wire
// carries it: mdsproto.Recall).
type Recall struct {
	Ino    uint64 `json:"ino"`
	Handle uint64 `json:"handle"`
	Lo     int64  `json:"lo"`
	Hi     int64  `json:"hi"`
	Seq    uint64 `json:"seq"`
}

// Lock is one granted range.
type Lock struct {
	Session, Handle uint64
	Span
	Seq uint64 // the newest grant merged into it
	// recalled is the part a recall was sent for, at recalledAt: asked
	// for again, it is not sent again for a while (the holder is
	// flushing), only if the answer may have been lost.
	recalled   Span
	recalledAt time.Time
}

// fileLocks is the lock state of one file.
type fileLocks struct {
	locks []Lock
	// end is the largest size holders handed over at release, of size
	// generation endGen; the next grant passes it on, so a writer never
	// fills a stripe from a size view that misses another's writes.
	end    int64
	endGen uint64
}

type session struct {
	// epoch numbers the session's life at this MDS: a session that lost
	// its locks (silent past the lease) starts again with a new one, and
	// its client, seeing it change, knows its locks are gone.
	epoch   uint64
	seen    time.Time // the last LockWait (or grant) from the session
	recalls []Recall
	// moved are files whose locks this process dropped with their slot
	// (DropInos): told at once, and again in every answer for a lease,
	// so an answer lost on the way is not the client's only notice.
	moved []movedFile
}

// movedFile is a file whose locks the session lost with its slot.
type movedFile struct {
	ino  uint64
	at   time.Time // when they were dropped
	told bool      // in an answer already
}

// Effects is what the caller must wake after decisions.
type Effects struct {
	// Released: files a lock went from; their waiters try again.
	Released []uint64
	// Woken: sessions a recall or a move was queued for, or that were
	// dropped; their waiting LockWait answers now.
	Woken []uint64
}

// Table holds every file's extent locks.
type Table struct {
	lease    time.Duration
	graceEnd time.Time // no grants before (locks of a previous process may still be used)
	// slotGraceEnd holds grants back in the slots this process gained
	// from another, each until its own grace ends. Bounded by the slots.
	slotGraceEnd map[uint32]time.Time
	slotOf       func(ino uint64) uint32
	files        map[uint64]*fileLocks
	sessions     map[uint64]*session
	n            int       // locks over all files
	seq          uint64    // grants made so far
	epochs       uint64    // sessions started so far
	idleAt       time.Time // when the table last became empty
	lastExpiry   time.Time // expiry runs at most every lease/8
	out          Effects
}

// New is an empty table of locks leased for lease; slotOf names an
// inode's slot.
func New(lease time.Duration, now time.Time, slotOf func(ino uint64) uint32) *Table {
	return &Table{lease: lease, slotOf: slotOf, files: map[uint64]*fileLocks{}, sessions: map[uint64]*session{}, idleAt: now}
}

// TakeEffects returns what must be woken since the last call, in order
// (map walks decide some of it; a replay must see the same).
func (t *Table) TakeEffects() Effects {
	e := t.out
	slices.Sort(e.Released)
	slices.Sort(e.Woken)
	t.out = Effects{}
	return e
}

// done checks the invariants after a decision.
func (t *Table) done() {
	if invariants.Enabled {
		invariants.Must(t.check())
	}
}

// Grace holds every grant back until now+lease+extra.
func (t *Table) Grace(now time.Time, extra time.Duration) {
	t.graceEnd = now.Add(t.lease + extra)
}

// GraceSlots holds grants in slots back until now+lease+extra: they were
// another process's, whose clients may still use locks it granted and
// reclaim them here meanwhile.
func (t *Table) GraceSlots(now time.Time, slots []uint32, extra time.Duration) {
	if t.slotGraceEnd == nil {
		t.slotGraceEnd = map[uint32]time.Time{}
	}
	maps.DeleteFunc(t.slotGraceEnd, func(_ uint32, end time.Time) bool { return !now.Before(end) })
	end := now.Add(t.lease + extra)
	for _, slot := range slots {
		if end.After(t.slotGraceEnd[slot]) {
			t.slotGraceEnd[slot] = end
		}
	}
}

// SlotGraceEnd is when the grace of a gained slot ends (zero: none).
func (t *Table) SlotGraceEnd(slot uint32) time.Time { return t.slotGraceEnd[slot] }

// graceEndOf is when grants of ino may start: after the grace of a
// start, and of its slot's gain.
func (t *Table) graceEndOf(ino uint64) time.Time {
	end := t.graceEnd
	if e, ok := t.slotGraceEnd[t.slotOf(ino)]; ok && e.After(end) {
		end = e
	}
	return end
}

// Acquired is Acquire's decision.
type Acquired struct {
	Granted bool
	Grant   Span
	Seq     uint64
	Epoch   uint64 // of the session
	End     int64  // size handed over by earlier holders (of EndGen)
	EndGen  uint64
	// Not granted: Wait for a lock on the file to go (Effects.Released
	// names it), or try again at Until (the grace after a start); Full
	// says the table is full.
	Wait  bool
	Until time.Time
	Full  bool
}

// Acquire grants handle of session the write lock on want, if no other
// handle holds part of it; otherwise, with recall, it queues recalls to
// the holders, and says to wait. whole widens an uncontended grant to
// the whole file.
func (t *Table) Acquire(now time.Time, ino, sess, handle uint64, want Span, whole, recall bool) Acquired {
	defer t.done()
	if end := t.graceEndOf(ino); now.Before(end) {
		return Acquired{Until: end}
	}
	t.expire(now, false)
	s := t.session(sess, now)
	if s == nil {
		return Acquired{Full: true, Until: now.Add(t.lease / 4)}
	}
	s.forgetMoved(ino) // its slot came back: what it holds here is current
	fl := t.file(ino)
	conflict, others := false, false
	for i := range fl.locks {
		l := &fl.locks[i]
		if l.Handle == handle {
			continue
		}
		others = true
		if !l.Overlaps(want) {
			continue
		}
		conflict = true
		if !recall {
			continue
		}
		r := Span{max(l.Lo, want.Lo), min(l.Hi, want.Hi)}
		if l.recalled.Lo <= r.Lo && r.Hi <= l.recalled.Hi && now.Sub(l.recalledAt) < t.lease/2 {
			continue // sent already; the holder is on it
		}
		l.recalled, l.recalledAt = r, now
		t.recall(l.Session, Recall{Ino: ino, Handle: l.Handle, Lo: r.Lo, Hi: r.Hi, Seq: l.Seq})
	}
	if conflict {
		return Acquired{Wait: true}
	}
	if whole && !others {
		want = Span{0, MaxStripe}
	}
	if t.n >= MaxLocks {
		t.expire(now, true)
		if t.n >= MaxLocks {
			return Acquired{Full: true, Until: now.Add(t.lease / 4)}
		}
	}
	t.seq++
	t.add(fl, Lock{Session: sess, Handle: handle, Span: want, Seq: t.seq})
	return Acquired{Granted: true, Grant: want, Seq: t.seq, Epoch: s.epoch, End: fl.end, EndGen: fl.endGen}
}

// file returns ino's entry, made if need be.
func (t *Table) file(ino uint64) *fileLocks {
	fl := t.files[ino]
	if fl == nil {
		if len(t.files) >= MaxFiles {
			t.evict()
		}
		fl = &fileLocks{}
		t.files[ino] = fl
	}
	return fl
}

// Reclaim takes back locks a handle held from the previous MDS process,
// during the grace (when nothing else can have been granted), with its
// view of the size. It returns the seq the locks now have.
func (t *Table) Reclaim(now time.Time, ino, sess, handle uint64, spans []Span, end int64, gen uint64) (seq, epoch uint64, err error) {
	defer t.done()
	if !now.Before(t.graceEndOf(ino)) {
		return 0, 0, fmt.Errorf("extent locks can be reclaimed only in the first %v after an MDS start or a file's move to it (%w)", t.lease, ErrNotInGrace)
	}
	s := t.session(sess, now)
	if s == nil || t.n+len(spans) > MaxLocks {
		return 0, 0, ErrFull
	}
	s.forgetMoved(ino)
	fl := t.file(ino)
	for _, want := range spans {
		for _, l := range fl.locks {
			if l.Handle != handle && l.Overlaps(want) {
				// Two holders of one range: one of them was never
				// granted it (a bug, or a clock far off). Neither gets
				// it back from here.
				return 0, 0, fmt.Errorf("inode %d stripes %s %w", ino, want, ErrTwoHolders)
			}
		}
	}
	fl.handOver(end, gen)
	t.seq++
	for _, sp := range spans {
		t.add(fl, Lock{Session: sess, Handle: handle, Span: sp, Seq: t.seq})
	}
	return t.seq, s.epoch, nil
}

// handOver records a holder's view of the size, of generation gen.
func (fl *fileLocks) handOver(end int64, gen uint64) {
	switch {
	case gen > fl.endGen:
		fl.end, fl.endGen = end, gen
	case gen == fl.endGen:
		fl.end = max(fl.end, end)
	}
}

// add records l, merged with the handle's ranges it touches.
func (t *Table) add(fl *fileLocks, l Lock) {
	kept := fl.locks[:0]
	for _, o := range fl.locks {
		if o.Handle == l.Handle && o.Lo <= l.Hi && l.Lo <= o.Hi {
			l.Lo, l.Hi, l.Seq = min(l.Lo, o.Lo), max(l.Hi, o.Hi), max(l.Seq, o.Seq)
			t.n--
			continue
		}
		kept = append(kept, o)
	}
	fl.locks = append(kept, l)
	t.n++
}

// recall queues r for a session, once.
func (t *Table) recall(sess uint64, r Recall) {
	s := t.sessions[sess]
	if s == nil || slices.Contains(s.recalls, r) {
		return
	}
	if len(s.recalls) >= MaxQueuedRecalls {
		// The session is not taking its recalls: it will lose its locks
		// to the lease; the acquirer waits for that.
		return
	}
	s.recalls = append(s.recalls, r)
	t.wake(sess)
}

func (t *Table) wake(sess uint64) {
	if !slices.Contains(t.out.Woken, sess) {
		t.out.Woken = append(t.out.Woken, sess)
	}
}

func (t *Table) session(id uint64, now time.Time) *session {
	s := t.sessions[id]
	if s == nil {
		if len(t.sessions) >= MaxSessions {
			return nil
		}
		t.epochs++
		s = &session{epoch: t.epochs}
		t.sessions[id] = s
	}
	s.seen = now
	return s
}

// Release gives back stripes r of handle's locks granted by grant seq
// or before, with the holder's view of the size (end, of generation gen).
func (t *Table) Release(ino, handle uint64, r Span, seq uint64, end int64, gen uint64) {
	defer t.done()
	fl := t.files[ino]
	if fl == nil {
		return
	}
	fl.handOver(end, gen)
	var out []Lock
	for _, l := range fl.locks {
		if l.Handle != handle || !l.Overlaps(r) || l.Seq > seq {
			// A lock granted after what the holder gives back (the answer
			// to its grant had not reached it yet) stays.
			out = append(out, l)
			continue
		}
		t.n--
		if l.Lo < r.Lo {
			left := l
			left.Hi = r.Lo
			out = append(out, left)
			t.n++
		}
		if r.Hi < l.Hi {
			right := l
			right.Lo = r.Hi
			out = append(out, right)
			t.n++
		}
	}
	fl.locks = out
	t.released(ino, fl)
}

// DropHandle releases every lock of handle on ino (its file closed, or
// its writer's lease ran out).
func (t *Table) DropHandle(ino, handle uint64) {
	defer t.done()
	fl := t.files[ino]
	if fl == nil {
		return
	}
	fl.locks = slices.DeleteFunc(fl.locks, func(l Lock) bool {
		if l.Handle == handle {
			t.n--
			return true
		}
		return false
	})
	t.released(ino, fl)
}

// Truncated starts size generation gen for ino: what holders handed over
// before no longer counts.
func (t *Table) Truncated(ino uint64, gen uint64) {
	defer t.done()
	if fl := t.files[ino]; fl != nil && gen > fl.endGen {
		fl.end, fl.endGen = 0, gen
		t.forget(ino, fl)
	}
}

func (t *Table) released(ino uint64, fl *fileLocks) {
	t.forget(ino, fl)
	if !slices.Contains(t.out.Released, ino) {
		t.out.Released = append(t.out.Released, ino)
	}
}

// forget drops a file's entry once it holds nothing: no lock, and no
// size handed over that a commit has not recorded yet (the next holder
// must get it even if the last lock went with it).
func (t *Table) forget(ino uint64, fl *fileLocks) {
	if len(fl.locks) == 0 && fl.end == 0 {
		delete(t.files, ino)
	}
}

// Committed notes a commit of size (generation gen): a size handed over
// that it covers is recorded, and need not be kept.
func (t *Table) Committed(ino uint64, size int64, gen uint64) {
	defer t.done()
	if fl := t.files[ino]; fl != nil && gen == fl.endGen && size >= fl.end {
		fl.end = 0
		t.forget(ino, fl)
	}
}

// evict makes room by forgetting sizes handed over for files no one
// holds a lock on (their writers have not committed for long: a writer
// that died left them, and its writes were never acknowledged).
func (t *Table) evict() {
	for ino, fl := range t.files {
		if len(fl.locks) == 0 {
			delete(t.files, ino)
		}
		if len(t.files) < MaxFiles*3/4 {
			return
		}
	}
}

// expire drops sessions silent for a lease, with their locks; a session
// heard from again starts a new epoch. It runs at most every lease/8
// unless forced: it walks every session and lock.
func (t *Table) expire(now time.Time, force bool) {
	if !force && now.Sub(t.lastExpiry) < t.lease/8 {
		return
	}
	t.lastExpiry = now
	dead := map[uint64]bool{}
	for id, s := range t.sessions {
		if now.Sub(s.seen) > t.lease {
			dead[id] = true
			delete(t.sessions, id)
		}
	}
	t.dropSessions(dead)
}

// DropInos drops the locks on every inode gone says is no longer this
// process's (its slot moved), and tells their sessions which files at
// their next LockWait (woken now): those clients reclaim the files'
// locks at the new owner in its grace, and keep their locks of the files
// still served here. Past the new owner's grace, what was not reclaimed
// goes to others. A session with more than MaxMovedPerSession files
// moved within a lease is dropped whole instead (its client finds a new
// epoch).
func (t *Table) DropInos(now time.Time, gone func(ino uint64) bool) {
	defer t.done()
	dead := map[uint64]bool{}
	for ino, fl := range t.files {
		if !gone(ino) {
			continue
		}
		for _, l := range fl.locks {
			s := t.sessions[l.Session]
			if s == nil || dead[l.Session] {
				continue
			}
			if s.tellMoved(ino, now, t.lease) {
				t.wake(l.Session)
			} else {
				dead[l.Session] = true
			}
		}
		t.n -= len(fl.locks)
		fl.locks = nil
		t.released(ino, fl)
	}
	for id := range dead {
		if t.sessions[id] != nil {
			t.wake(id)
		}
		delete(t.sessions, id)
	}
	t.dropSessions(dead)
}

// tellMoved queues ino as moved for the session's next LockWait; false
// if the session has too many queued within a lease.
func (s *session) tellMoved(ino uint64, now time.Time, lease time.Duration) bool {
	s.forgetMoved(ino) // moved again: told again
	if len(s.moved) >= MaxMovedPerSession {
		s.moved = slices.DeleteFunc(s.moved, func(m movedFile) bool { return now.Sub(m.at) > lease })
	}
	if len(s.moved) >= MaxMovedPerSession {
		return false
	}
	s.moved = append(s.moved, movedFile{ino: ino, at: now})
	return true
}

// dropSessions removes the locks of the sessions dead.
func (t *Table) dropSessions(dead map[uint64]bool) {
	if len(dead) == 0 {
		return
	}
	for ino, fl := range t.files {
		before := len(fl.locks)
		fl.locks = slices.DeleteFunc(fl.locks, func(l Lock) bool { return dead[l.Session] })
		if len(fl.locks) != before {
			t.n -= before - len(fl.locks)
			t.released(ino, fl)
		}
	}
}

// Answer is what a LockWait answers: the session's queued recalls, the
// files moved away (DropInos), and its epoch.
type Answer struct {
	Recalls []Recall
	Moved   []uint64
	Epoch   uint64
}

// take hands s's queued recalls and moved files to an answer; moved
// files are named again until a lease has passed since they moved.
func (s *session) take(now time.Time, lease time.Duration) Answer {
	a := Answer{Recalls: s.recalls, Epoch: s.epoch}
	s.recalls = nil
	s.moved = slices.DeleteFunc(s.moved, func(m movedFile) bool { return now.Sub(m.at) > lease })
	for i := range s.moved {
		a.Moved = append(a.Moved, s.moved[i].ino)
		s.moved[i].told = true
	}
	return a
}

// forgetMoved stops naming ino as moved: the session took a lock on it
// here again (its slot came back), which a late notice must not undo.
func (s *session) forgetMoved(ino uint64) {
	s.moved = slices.DeleteFunc(s.moved, func(m movedFile) bool { return m.ino == ino })
}

// untold reports whether a moved file has not been named in an answer.
func (s *session) untold() bool {
	return slices.ContainsFunc(s.moved, func(m movedFile) bool { return !m.told })
}

// Wait renews a session's locks and returns its queued recalls and
// moves; wait says there are none, and the caller waits until
// Effects.Woken names the session (or its wait ends), then calls Waited.
func (t *Table) Wait(now time.Time, sess uint64) (a Answer, wait bool, err error) {
	defer t.done()
	t.expire(now, false)
	s := t.session(sess, now)
	if s == nil {
		return Answer{}, false, fmt.Errorf("%w: %d lock sessions", ErrFull, len(t.sessions))
	}
	if len(s.recalls) > 0 || s.untold() {
		return s.take(now, t.lease), false, nil
	}
	return Answer{Epoch: s.epoch}, true, nil
}

// Waited ends a LockWait that returned nothing: the session counts as
// seen now. Its answer's epoch is a new one if the session was dropped
// meanwhile, which tells the client its locks are gone.
func (t *Table) Waited(now time.Time, sess uint64) Answer {
	defer t.done()
	s := t.session(sess, now)
	if s == nil {
		return Answer{}
	}
	return s.take(now, t.lease)
}

// Empty reports whether no lock is held, and since when.
func (t *Table) Empty(now time.Time) (bool, time.Time) {
	defer t.done()
	t.expire(now, false)
	if t.n > 0 {
		t.idleAt = now
		return false, now
	}
	return true, t.idleAt
}

// Held lists the locks on ino, for tests and status.
func (t *Table) Held(ino uint64) []Lock {
	if fl := t.files[ino]; fl != nil {
		return slices.Clone(fl.locks)
	}
	return nil
}

// check: the lock count matches the locks; no two handles hold
// overlapping ranges of a file; every range is non-empty; the bounds
// hold; no seq is ahead of the grants made.
func (t *Table) check() error {
	if len(t.files) > MaxFiles || len(t.sessions) > MaxSessions || t.n > MaxLocks {
		return fmt.Errorf("table over its bounds: %d files, %d sessions, %d locks", len(t.files), len(t.sessions), t.n)
	}
	if t.n > fullCheckMax {
		return nil // the walk below would cost more than the decision
	}
	n := 0
	for ino, fl := range t.files {
		n += len(fl.locks)
		for i, a := range fl.locks {
			if a.Lo < 0 || a.Hi <= a.Lo || a.Hi > MaxStripe {
				return fmt.Errorf("inode %d: lock on %s", ino, a.Span)
			}
			if a.Seq == 0 || a.Seq > t.seq {
				return fmt.Errorf("inode %d: lock seq %d of %d grants", ino, a.Seq, t.seq)
			}
			for _, b := range fl.locks[i+1:] {
				if a.Handle != b.Handle && a.Overlaps(b.Span) {
					return fmt.Errorf("inode %d: handles %d and %d both hold %s and %s", ino, a.Handle, b.Handle, a.Span, b.Span)
				}
			}
		}
	}
	if n != t.n {
		return fmt.Errorf("lock count %d, %d locks held", t.n, n)
	}
	for id, s := range t.sessions {
		if len(s.recalls) > MaxQueuedRecalls || len(s.moved) > MaxMovedPerSession || s.epoch == 0 || s.epoch > t.epochs {
			return fmt.Errorf("session %d: %d recalls, %d moved, epoch %d of %d", id, len(s.recalls), len(s.moved), s.epoch, t.epochs)
		}
	}
	return nil
}
