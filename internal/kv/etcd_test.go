package kv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEtcdTransactionsConflict: interleavings that would break
// serializability end in ErrConflict for the later commit: a key read and
// changed since, a key added to a scanned range (a phantom), a key removed
// from one, and a guard too large to name key by key. Update then runs the
// transaction again.
func TestEtcdTransactionsConflict(t *testing.T) {
	e, err := openTestEtcd(filepath.Join(t.TempDir(), "meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	et := e.(*Etcd)
	put := func(k, v string) {
		t.Helper()
		if err := e.Update(ctx, func(tx Txn) error { return tx.Put([]byte(k), []byte(v)) }); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "1")
	put("r/1", "x")
	// Each case: t1 reads, another commit intervenes, t1 writes and commits.
	for _, c := range []struct {
		name   string
		read   func(t1 *etcdTxn)
		change func()
	}{
		{"a key read and changed since", func(t1 *etcdTxn) { _, _ = t1.Get([]byte("a")) }, func() { put("a", "2") }},
		{"an absent key read and made since", func(t1 *etcdTxn) { _, _ = t1.Get([]byte("none")) }, func() { put("none", "now") }},
		{"a key added to a scanned range", func(t1 *etcdTxn) {
			_ = t1.Scan([]byte("r/"), PrefixEnd([]byte("r/")), func(k, v []byte) bool { return true })
		}, func() { put("r/2", "new") }},
		{"a key removed from a scanned range", func(t1 *etcdTxn) {
			_ = t1.Scan([]byte("r/"), PrefixEnd([]byte("r/")), func(k, v []byte) bool { return true })
		}, func() {
			if err := e.Update(ctx, func(tx Txn) error { return tx.Delete([]byte("r/1")) }); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t1 := et.begin(ctx)
		c.read(t1)
		c.change()
		_ = t1.Put([]byte("out"), []byte(c.name))
		if err := t1.commit(); !errors.Is(err, ErrConflict) {
			t.Errorf("%s: commit %v, want ErrConflict", c.name, err)
		}
	}
	// A guard of more keys than a txn may compare falls back to the
	// clock: any commit since the snapshot conflicts.
	small := &Etcd{cli: et.cli, root: et.root, prefix: et.prefix, clock: et.clock, maxTxnOps: 3}
	t1 := small.begin(ctx)
	for i := 0; i < 5; i++ {
		_, _ = t1.Get([]byte(fmt.Sprintf("k%d", i)))
	}
	put("unrelated", "x")
	_ = t1.Put([]byte("out"), []byte("big guard"))
	if err := t1.commit(); !errors.Is(err, ErrConflict) {
		t.Errorf("a guard past the limit: %v, want ErrConflict", err)
	}
	// Too many writes for one txn is refused whole.
	err = small.Update(ctx, func(tx Txn) error {
		for i := 0; i < 5; i++ {
			_ = tx.Put([]byte(fmt.Sprintf("w%d", i)), nil)
		}
		return nil
	})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("5 writes with a limit of 3: %v, want ErrTooLarge", err)
	}
	if v, _ := get(t, e, "w0"); v != nil {
		t.Error("part of a refused transaction was written")
	}
}

// TestEtcdTwoClientsCounting: two MDS processes' engines on one etcd
// cluster increment one counter concurrently; conflicts happen, are
// retried, and no increment is lost.
func TestEtcdTwoClientsCounting(t *testing.T) {
	e, err := openTestEtcd(filepath.Join(t.TempDir(), "meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	other, err := OpenEtcd(ctx, EtcdOptions{Endpoints: e.(*Etcd).cli.Endpoints(), MaxTxnOps: etcdMaxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var tries atomic.Int64
	var wg sync.WaitGroup
	const each = 25
	for _, eng := range []Engine{e, other, e, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				err := eng.Update(ctx, func(tx Txn) error {
					tries.Add(1)
					v, err := tx.Get([]byte("n"))
					if err != nil {
						return err
					}
					var n int
					fmt.Sscan(string(v), &n)
					return tx.Put([]byte("n"), []byte(fmt.Sprint(n+1)))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if v, _ := get(t, e, "n"); string(v) != fmt.Sprint(4*each) {
		t.Fatalf("counter %s, want %d", v, 4*each)
	}
	if tries.Load() == 4*each {
		t.Logf("no conflict met in %d increments (the interleaving allowed it)", 4*each)
	} else {
		t.Logf("%d attempts for %d increments", tries.Load(), 4*each)
	}
}

func get(t *testing.T, e Engine, k string) ([]byte, error) {
	t.Helper()
	var out []byte
	err := e.View(context.Background(), func(r Reader) error {
		var err error
		out, err = r.Get([]byte(k))
		return err
	})
	return out, err
}

// TestEtcdLead: a second engine's Lead waits while the first holds the
// lock and takes it when the first closes; the first's engine, had it
// lost the lock while running, finds its commits refused.
func TestEtcdLead(t *testing.T) {
	e, err := openTestEtcd(filepath.Join(t.TempDir(), "meta"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	first := e.(*Etcd)
	second, err := OpenEtcd(ctx, EtcdOptions{Endpoints: first.cli.Endpoints(), MaxTxnOps: etcdMaxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	third, err := OpenEtcd(ctx, EtcdOptions{Endpoints: first.cli.Endpoints(), MaxTxnOps: etcdMaxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()

	lost, err := second.Lead(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	led := make(chan error, 1)
	go func() { _, err := third.Lead(ctx, time.Second); led <- err }()
	if err := second.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte("second")) }); err != nil {
		t.Fatalf("the leader's commit: %v", err)
	}
	select {
	case err := <-led:
		t.Fatalf("a standby led while the leader held the lock: %v", err)
	default:
	}
	// The leader's lease is revoked behind its back (as when it could not
	// reach etcd for its ttl): its commits are refused, and it is told.
	if _, err := first.cli.Revoke(ctx, second.leader().session.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := second.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte("deposed")) }); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a deposed leader's commit: %v, want ErrNotLeader", err)
	}
	select {
	case <-lost:
	case <-time.After(30 * time.Second):
		t.Fatal("the deposed leader was not told")
	}
	select {
	case err := <-led:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the standby did not take the lead")
	}
	if err := third.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte("third")) }); err != nil {
		t.Fatalf("the new leader's commit: %v", err)
	}
	if v, _ := get(t, e, "k"); string(v) != "third" {
		t.Fatalf("k = %q", v)
	}
}
