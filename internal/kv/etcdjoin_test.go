package kv

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestEtcdJoin: several processes join as actives. Each commits; one
// leads, and only its AsLeader commits go through; status tells the
// leader from the others; when the leader's lease is revoked, its session
// ends (it is told), its AsLeader commits are refused, and another leads.
func TestEtcdJoin(t *testing.T) {
	e := newTestEtcd(t)
	ctx := context.Background()
	first := e.(*Etcd)
	open := func() *Etcd {
		o, err := OpenEtcd(ctx, EtcdOptions{Endpoints: first.cli.Endpoints(), MaxTxnOps: etcdMaxTxnOps, TLS: first.tls})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { o.Close() })
		return o
	}
	a, b := open(), open()
	overA, err := a.Join(ctx, time.Second, ProcessRecord{Name: "a", Addr: "127.0.0.1:1", Pid: 1, Joined: true})
	if err != nil {
		t.Fatal(err)
	}
	if u := a.ServeUntil(); !u.After(time.Now()) || u.After(time.Now().Add(time.Second)) {
		t.Fatalf("a vouches for its session until %v (now %v, ttl 1s)", u, time.Now())
	}
	eventually(t, 30*time.Second, func() bool { return !a.LeadUntil().IsZero() }, func() string { return "the first to join never led" })
	if _, err := b.Join(ctx, time.Second, ProcessRecord{Name: "b", Addr: "127.0.0.1:2", Pid: 2, Joined: true}); err != nil {
		t.Fatal(err)
	}
	if got := roles(t, first); got != "a=leader@127.0.0.1:1 b=active@127.0.0.1:2" {
		t.Fatalf("processes: %s", got)
	}
	put := func(e *Etcd, ctx context.Context, v string) error {
		return e.Update(ctx, func(tx Txn) error {
			if _, err := tx.Get([]byte("k")); err != nil {
				return err
			}
			return tx.Put([]byte("k"), []byte(v))
		})
	}
	for _, p := range []*Etcd{a, b} {
		if err := put(p, ctx, "plain"); err != nil {
			t.Fatalf("an active's commit: %v", err)
		}
	}
	if err := put(a, AsLeader(ctx), "leader's"); err != nil {
		t.Fatalf("the leader's duty commit: %v", err)
	}
	if err := put(b, AsLeader(ctx), "not the leader's"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a duty commit by a process not leading: %v, want ErrNotLeader", err)
	}
	// a's lease is revoked behind its back: it is told, and b leads.
	if _, err := first.cli.Revoke(ctx, a.member.session.Lease()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-overA:
	case <-time.After(30 * time.Second):
		t.Fatal("a was not told its session ended")
	}
	if !a.ServeUntil().IsZero() || !a.LeadUntil().IsZero() {
		t.Fatal("a process whose session ended still vouches for it")
	}
	if err := put(a, AsLeader(ctx), "deposed"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a deposed leader's duty commit: %v, want ErrNotLeader", err)
	}
	eventually(t, 30*time.Second, func() bool { return !b.LeadUntil().IsZero() }, func() string { return "b never led after a's session ended" })
	if err := put(b, AsLeader(ctx), "b leads"); err != nil {
		t.Fatalf("the new leader's duty commit: %v", err)
	}
	if got := roles(t, first); got != "b=leader@127.0.0.1:2" {
		t.Fatalf("processes after a's session ended: %s", got)
	}
	if v, _ := get(t, e, "k"); string(v) != "b leads" {
		t.Fatalf("k = %q", v)
	}
}
