package kv

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// Several processes on one Shared engine: the oldest live session leads,
// and only its AsLeader commits land; a crashed process keeps its session
// (and the lead) until its ttl runs out after its last keepalive, then the
// next takes over; one that leaves hands over at once. Unguarded commits
// land from any of them.
func TestSharedLeadFollowsSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng, err := OpenPebble(filepath.Join(t.TempDir(), "store"), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		sh := NewShared(eng)
		defer sh.Close()
		const ttl = 3 * time.Second
		a := sh.Join(ttl, ProcessRecord{Name: "a"})
		b := sh.Join(ttl, ProcessRecord{Name: "b"})
		c := sh.Join(ttl, ProcessRecord{Name: "c"})
		synctest.Wait() // the elector recorded a
		put := func(m *SharedMember, leader bool) error {
			ctx := context.Background()
			if leader {
				ctx = AsLeader(ctx)
			}
			return m.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte(m.s.rec.Name)) })
		}
		leads := func(want *SharedMember) {
			t.Helper()
			for _, m := range []*SharedMember{a, b, c} {
				err := put(m, true)
				switch {
				case m == want && err != nil:
					t.Fatalf("%s leads, its guarded commit: %v", m, err)
				case m != want && !errors.Is(err, ErrNotLeader):
					t.Fatalf("%s does not lead, its guarded commit: %v, want ErrNotLeader", m, err)
				case m == want && !m.LeadUntil().After(time.Now()):
					t.Fatalf("%s leads until %v (now %v)", m, m.LeadUntil(), time.Now())
				case m != want && !m.LeadUntil().IsZero():
					t.Fatalf("%s does not lead, yet leads until %v", m, m.LeadUntil())
				}
			}
		}
		leads(a)
		if err := put(b, false); err != nil {
			t.Fatalf("an unguarded commit by a process not leading: %v", err)
		}

		// The bubble's clock moves on: simulated time passing, which the
		// assertions after are about, not a wait for some state.
		clockPasses := func(d time.Duration) { <-time.After(d) }
		clockPasses(10 * ttl)
		leads(a) // keepalives held every session
		crashed := time.Now()
		a.Crash()
		clockPasses(ttl / 2)
		leads(a) // its lease outlives it
		<-a.Over()
		if lapsed := time.Since(crashed); lapsed > ttl || lapsed < ttl/3*2 {
			t.Fatalf("a crashed session lapsed %v after its process died (ttl %v, keepalives every ttl/3)", lapsed, ttl)
		}
		synctest.Wait()
		leads(b)
		if !a.ServeUntil().IsZero() {
			t.Fatalf("a lapsed session serves until %v", a.ServeUntil())
		}

		a2 := sh.Join(ttl, ProcessRecord{Name: "a"}) // a restarted: queues behind c
		b.Leave()
		synctest.Wait()
		leads(c)
		procs := sh.Processes()
		if len(procs) != 2 || procs[0].Name != "c" || procs[0].Role != RoleLeader || procs[1].Name != "a" || procs[1].Role != RoleActive {
			t.Fatalf("processes: %+v", procs)
		}
		if err := put(a2, true); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("a restarted process behind the leader, its guarded commit: %v", err)
		}
	})
}
