package kv

// Shared is the simulation's twin of etcd in its several-actives mode
// (Etcd.Join): one engine that several MDS processes in one test process
// share, with the coordination etcd gives them. Each process joins with a
// session that lapses ttl after its last keepalive; the oldest live
// session holds the lead; a commit marked AsLeader is refused
// (ErrNotLeader) unless the session it is made under holds the lead when
// it commits. etcd itself cannot run where the simulation does (a
// synctest bubble, on simulated time: no real sockets or disk), so the
// simulation runs several MDS processes on this.
//
// Like etcd, the engine is the arbiter. The lead is a key in it
// (sharedLeadKey) that a guarded commit reads inside its transaction, as
// an etcd commit compares the lock's key: a lead that changed hands is
// refused atomically, never decided on a copy held in memory. A session
// ends when it is not kept alive past its ttl: its process crashed
// (Crash: keepalives stop, its process record and lead stay until then)
// or left (Leave: at once). A crashed process's session outlives the
// process, as an etcd lease does, which is what successors must wait out.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// electRetry is the wait before the elector tries a failed commit again.
const electRetry = 10 * time.Millisecond

// sharedLeadKey holds the id of the session leading, past every key the
// MDS scans.
var sharedLeadKey = []byte("\xffshared/lead")

// Shared is one engine, and the sessions of the processes sharing it.
type Shared struct {
	eng Engine

	mu       sync.Mutex
	sessions []*sharedSession // live, in the order they joined
	nextID   uint64
	leader   uint64 // the session the engine records as leading (0: none yet)

	elect     chan struct{} // a session ended or joined: the lead may move
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type sharedSession struct {
	id      uint64
	rec     ProcessRecord
	ttl     time.Duration
	expires time.Time     // guarded by Shared.mu; extended by keepalives
	over    chan struct{} // closed when the session ends
	crashed chan struct{} // closed to stop the keepalives
	once    sync.Once
}

// NewShared shares eng between the processes that Join it. Close closes
// eng.
func NewShared(eng Engine) *Shared {
	sh := &Shared{eng: eng, elect: make(chan struct{}, 1), closed: make(chan struct{})}
	sh.wg.Add(1)
	go sh.elector()
	return sh
}

// Close ends every session and closes the engine (once).
func (sh *Shared) Close() error {
	err := errors.New("kv: shared engine closed already")
	sh.closeOnce.Do(func() {
		close(sh.closed)
		sh.wg.Wait()
		err = sh.eng.Close()
	})
	return err
}

// Join starts a session of ttl for the process rec describes, kept alive
// (every ttl/3) until Crash or Leave.
func (sh *Shared) Join(ttl time.Duration, rec ProcessRecord) *SharedMember {
	rec.Joined = true
	sh.mu.Lock()
	sh.nextID++
	s := &sharedSession{id: sh.nextID, rec: rec, ttl: ttl, expires: time.Now().Add(ttl),
		over: make(chan struct{}), crashed: make(chan struct{})}
	sh.sessions = append(sh.sessions, s)
	sh.mu.Unlock()
	sh.wg.Add(1)
	go sh.keepAlive(s)
	sh.poke()
	return &SharedMember{sh: sh, s: s}
}

// keepAlive renews s every ttl/3 until its process crashes, then lets it
// lapse at its expiry; it ends s.
func (sh *Shared) keepAlive(s *sharedSession) {
	defer sh.wg.Done()
	t := time.NewTicker(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-sh.closed:
			sh.end(s)
			return
		case <-s.over:
			return
		case <-s.crashed:
			sh.lapse(s)
			return
		case <-t.C:
			sh.mu.Lock()
			s.expires = time.Now().Add(s.ttl)
			sh.mu.Unlock()
		}
	}
}

// lapse waits out s's lease (its process no longer renews it) and ends it.
func (sh *Shared) lapse(s *sharedSession) {
	sh.mu.Lock()
	left := time.Until(s.expires)
	sh.mu.Unlock()
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.over:
		return
	case <-sh.closed:
	}
	sh.end(s)
}

// end removes s from the live sessions: its record goes, and the lead if
// it held it (once the elector records its successor).
func (sh *Shared) end(s *sharedSession) {
	s.once.Do(func() {
		sh.mu.Lock()
		for i, o := range sh.sessions {
			if o == s {
				sh.sessions = append(sh.sessions[:i:i], sh.sessions[i+1:]...)
				break
			}
		}
		sh.mu.Unlock()
		close(s.over)
		sh.poke()
	})
}

func (sh *Shared) poke() {
	select {
	case sh.elect <- struct{}{}:
	default:
	}
}

// elector records the oldest live session as the lead in the engine
// whenever the sessions change. It is one goroutine, waiting on a
// channel: the transaction is the only ordering the lead needs, and no
// lock is held while it commits.
func (sh *Shared) elector() {
	defer sh.wg.Done()
	for {
		select {
		case <-sh.closed:
			return
		case <-sh.elect:
		}
		sh.mu.Lock()
		var head uint64
		if len(sh.sessions) > 0 {
			head = sh.sessions[0].id
		}
		current := sh.leader
		sh.mu.Unlock()
		if head == current {
			continue
		}
		err := sh.eng.Update(context.Background(), func(tx Txn) error {
			return tx.Put(sharedLeadKey, binary.BigEndian.AppendUint64(nil, head))
		})
		if err != nil {
			t := time.NewTimer(electRetry) // then tried again
			select {
			case <-sh.closed:
				t.Stop()
				return
			case <-t.C:
			}
			sh.poke()
			continue
		}
		sh.mu.Lock()
		sh.leader = head
		sh.mu.Unlock()
	}
}

// Processes lists the live sessions' processes, one per name: a
// restarted process's newer session stands for it (in etcd its record,
// keyed by name, replaced the older one).
func (sh *Shared) Processes() []ProcessStatus {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var out []ProcessStatus
	byName := map[string]int{}
	for _, s := range sh.sessions {
		i, ok := byName[s.rec.Name]
		if !ok {
			i = len(out)
			byName[s.rec.Name] = i
			out = append(out, ProcessStatus{Role: RoleActive})
		}
		// The newest session of a name stands for it, in its own role.
		out[i] = ProcessStatus{ProcessRecord: s.rec, Role: RoleActive}
		if s.id == sh.leader {
			out[i].Role = RoleLeader
		}
	}
	return out
}

// SharedMember is one process's handle on a Shared engine: an Engine
// whose AsLeader commits are guarded by its session's lead.
type SharedMember struct {
	sh *Shared
	s  *sharedSession
}

// Over is closed when the session ends.
func (m *SharedMember) Over() <-chan struct{} { return m.s.over }

// ServeUntil is the time until which the session surely lives (zero once
// it ended).
func (m *SharedMember) ServeUntil() time.Time {
	m.sh.mu.Lock()
	defer m.sh.mu.Unlock()
	select {
	case <-m.s.over:
		return time.Time{}
	default:
		return m.s.expires
	}
}

// LeadUntil is the time until which this process surely leads (zero: it
// does not).
func (m *SharedMember) LeadUntil() time.Time {
	m.sh.mu.Lock()
	leads := m.sh.leader == m.s.id
	m.sh.mu.Unlock()
	if !leads {
		return time.Time{}
	}
	return m.ServeUntil()
}

// Crash stops the session's keepalives, as its process dying does: it
// lapses ttl after the last one.
func (m *SharedMember) Crash() {
	select {
	case <-m.s.crashed:
	default:
		close(m.s.crashed)
	}
}

// Leave ends the session at once (an etcd lease revoked).
func (m *SharedMember) Leave() { m.sh.end(m.s) }

// View reads the shared engine.
func (m *SharedMember) View(ctx context.Context, fn func(Reader) error) error {
	return m.sh.eng.View(ctx, fn)
}

// Update commits to the shared engine; marked AsLeader, only while the
// engine records this session as leading.
func (m *SharedMember) Update(ctx context.Context, fn func(Txn) error) error {
	if !isAsLeader(ctx) {
		return m.sh.eng.Update(ctx, fn)
	}
	self := binary.BigEndian.AppendUint64(nil, m.s.id)
	return m.sh.eng.Update(ctx, func(tx Txn) error {
		v, err := tx.Get(sharedLeadKey)
		if err != nil {
			return err
		}
		if !bytes.Equal(v, self) {
			return ErrNotLeader
		}
		return fn(tx)
	})
}

// Close leaves the shared engine open (its other processes use it).
func (m *SharedMember) Close() error { return nil }

// String names the member's process and session, for logs.
func (m *SharedMember) String() string { return fmt.Sprintf("%s (session %d)", m.s.rec.Name, m.s.id) }

// Announce records where the member's process serves (its port chosen
// when it listened).
func (m *SharedMember) Announce(addr string) {
	m.sh.mu.Lock()
	defer m.sh.mu.Unlock()
	m.s.rec.Addr = addr
}
