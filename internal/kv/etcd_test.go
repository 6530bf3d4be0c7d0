package kv

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestEtcdTransactionsConflict: interleavings that would break
// serializability end in ErrConflict for the later commit: a key read and
// changed since, a key added to a scanned range (a phantom), a key removed
// from one, and a guard too large to name key by key. Update then runs the
// transaction again.
func TestEtcdTransactionsConflict(t *testing.T) {
	e := newTestEtcd(t)
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
		{"keys read together, one changed since", func(t1 *etcdTxn) {
			_, _ = t1.Get([]byte("r/1"))
			_, _ = t1.GetMany([][]byte{[]byte("none2"), []byte("a")})
		}, func() { put("a", "3") }},
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
	err := small.Update(ctx, func(tx Txn) error {
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
	e := newTestEtcd(t)
	ctx := context.Background()
	other, err := OpenEtcd(ctx, EtcdOptions{Endpoints: e.(*Etcd).cli.Endpoints(), MaxTxnOps: etcdMaxTxnOps, TLS: e.(*Etcd).tls})
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
	e := newTestEtcd(t)
	ctx := context.Background()
	first := e.(*Etcd)
	second, err := OpenEtcd(ctx, EtcdOptions{Endpoints: first.cli.Endpoints(), MaxTxnOps: etcdMaxTxnOps, TLS: first.tls})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	third, err := OpenEtcd(ctx, EtcdOptions{Endpoints: first.cli.Endpoints(), MaxTxnOps: etcdMaxTxnOps, TLS: first.tls})
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()

	lost, err := second.Lead(ctx, time.Second, ProcessRecord{Name: "second", Addr: "127.0.0.1:1", Pid: 2})
	if err != nil {
		t.Fatal(err)
	}
	// It can vouch for its lease for at most a ttl from now.
	if u := second.LeadUntil(); !u.After(time.Now()) || u.After(time.Now().Add(time.Second)) {
		t.Fatalf("the leader vouches for its lease until %v (now %v, ttl 1s)", u, time.Now())
	}
	led := make(chan error, 1)
	go func() { _, err := third.Lead(ctx, time.Second, ProcessRecord{Name: "third", Pid: 3}); led <- err }()
	if err := second.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte("second")) }); err != nil {
		t.Fatalf("the leader's commit: %v", err)
	}
	// The standby is waiting: its key is in the lock's queue.
	var queued int64
	eventually(t, 30*time.Second, func() bool {
		resp, err := first.cli.Get(ctx, first.root+"lead/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil {
			queued = resp.Count
		}
		return queued == 2
	}, func() string { return fmt.Sprintf("the standby never queued for the lock (%d keys)", queued) })
	select {
	case err := <-led:
		t.Fatalf("a standby led while the leader held the lock: %v", err)
	default:
	}
	if got := roles(t, first); got != "second=active@127.0.0.1:1 third=standby@" {
		t.Fatalf("processes while second leads: %s", got)
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
	// The deposed process's record went with its lease; the new active
	// says where it listens.
	if err := third.Announce(ctx, ProcessRecord{Name: "third", Addr: "127.0.0.1:3", Pid: 3}); err != nil {
		t.Fatal(err)
	}
	if got := roles(t, first); got != "third=active@127.0.0.1:3" {
		t.Fatalf("processes after the takeover: %s", got)
	}
	if ms := first.Members(ctx); len(ms) != 1 || !ms[0].Leader || ms[0].Error != "" || ms[0].DBBytes <= 0 {
		t.Fatalf("members of a one-member etcd: %+v", ms)
	}
	if v, _ := get(t, e, "k"); string(v) != "third" {
		t.Fatalf("k = %q", v)
	}
	// The deposed process stands by again: no commit until it leads, then
	// it leads when the active goes.
	second.Resign()
	if err := second.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte("resigned")) }); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a commit after resigning: %v, want ErrNotLeader", err)
	}
	relead := make(chan error, 1)
	go func() { _, err := second.Lead(ctx, time.Second, ProcessRecord{Name: "second", Pid: 2}); relead <- err }()
	eventually(t, 30*time.Second, func() bool { return roles(t, first) == "third=active@127.0.0.1:3 second=standby@" },
		func() string { return "the resigned process is not standing by: " + roles(t, first) })
	third.Close()
	select {
	case err := <-relead:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the standing-by process did not lead again")
	}
	if err := second.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte("second again")) }); err != nil {
		t.Fatalf("a commit after leading again: %v", err)
	}
	if v, _ := get(t, e, "k"); string(v) != "second again" {
		t.Fatalf("k = %q", v)
	}
}

// roles lists the MDS processes e's etcd records, as name=role@addr.
func roles(t *testing.T, e *Etcd) string {
	t.Helper()
	ps, err := e.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Name+"="+p.Role+"@"+p.Addr)
	}
	return strings.Join(out, " ")
}

func TestParseEtcdURL(t *testing.T) {
	o, err := ParseEtcdURL("etcd://e1:2379,e2:2379/team/braid?max-txn-ops=4096")
	if err != nil || len(o.Endpoints) != 2 || o.Endpoints[1] != "e2:2379" || o.Prefix != "team/braid/" || o.MaxTxnOps != 4096 {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range []string{"", "etcd://", "http://e1:2379", "etcd://e1?max-txn-ops=3", "etcd://,", "etcd://e1?ca=/x", "etcd://e1?ca=/no&cert=/no&key=/no"} {
		if _, err := ParseEtcdURL(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestEtcdScanAcrossPages: a scan of more keys than one range request
// fetches, with the transaction's own writes and deletes on both sides
// of page boundaries, sees each key once, in order, as written.
func TestEtcdScanAcrossPages(t *testing.T) {
	e := newTestEtcd(t)
	ctx := context.Background()
	const n = 3*etcdScanPage + 7
	if err := e.Update(ctx, func(tx Txn) error {
		for i := 0; i < n; i += 2 { // even keys stored
			if err := tx.Put([]byte(fmt.Sprintf("s/%05d", i)), []byte("stored")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err := e.Update(ctx, func(tx Txn) error {
		want := map[string]string{}
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("s/%05d", i)
			switch {
			case i%2 == 1 && i%3 == 0: // odd keys written in the transaction
				_ = tx.Put([]byte(k), []byte("mine"))
				want[k] = "mine"
			case i%2 == 0 && i%5 == 0: // stored keys deleted in it
				_ = tx.Delete([]byte(k))
			case i%2 == 0 && i%7 == 0: // stored keys overwritten in it
				_ = tx.Put([]byte(k), []byte("over"))
				want[k] = "over"
			case i%2 == 0:
				want[k] = "stored"
			}
		}
		var last string
		seen := 0
		if err := tx.Scan([]byte("s/"), PrefixEnd([]byte("s/")), func(k, v []byte) bool {
			if string(k) <= last {
				t.Errorf("scan out of order: %s after %s", k, last)
			}
			last = string(k)
			if want[string(k)] != string(v) {
				t.Errorf("%s = %q, want %q", k, v, want[string(k)])
			}
			seen++
			return true
		}); err != nil {
			return err
		}
		if seen != len(want) {
			t.Errorf("scan saw %d keys, want %d", seen, len(want))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestEtcdBindKeys: the first MDS records its keys' fingerprint; one with
// the same keys is admitted, one with others refused.
func TestEtcdBindKeys(t *testing.T) {
	e := newTestEtcd(t)
	ctx := context.Background()
	et := e.(*Etcd)
	if err := et.BindKeys(ctx, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := et.BindKeys(ctx, []byte("first")); err != nil {
		t.Fatalf("the same keys: %v", err)
	}
	if err := et.BindKeys(ctx, []byte("other")); !errors.Is(err, ErrKeysDiffer) {
		t.Fatalf("other keys: %v, want ErrKeysDiffer", err)
	}
	// Settings bind the same way, each on its own.
	if err := et.BindSetting(ctx, "lock-lease", "4s"); err != nil {
		t.Fatal(err)
	}
	if err := et.BindSetting(ctx, "lock-lease", "4s"); err != nil {
		t.Fatalf("the same lock lease: %v", err)
	}
	if err := et.BindSetting(ctx, "lock-lease", "9s"); !errors.Is(err, ErrSettingDiffers) || !strings.Contains(err.Error(), "9s here, 4s") {
		t.Fatalf("another lock lease: %v, want ErrSettingDiffers naming both", err)
	}
	if err := et.BindSetting(ctx, "other", "9s"); err != nil {
		t.Fatalf("another setting: %v", err)
	}
}

// newTestEtcd is an engine over a one-member etcd cluster of the test's.
func newTestEtcd(t *testing.T) Engine {
	t.Helper()
	e, err := openTestEtcd(filepath.Join(t.TempDir(), "meta"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// eventually polls cond on a ticker until it holds, failing the test with
// what() after timeout.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(what())
		case <-tick.C:
		}
	}
}

// TestEtcdURLWithTLS: an etcd cluster of the operator's own, reached by
// URL with a client certificate and the CA to trust.
func TestEtcdURLWithTLS(t *testing.T) {
	e := newTestEtcd(t).(*Etcd)
	files, err := testEtcdTLS(filepath.Join(t.TempDir(), "client"), testEtcdSecret)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(e.cli.Endpoints()[0], "https://")
	o, err := ParseEtcdURL("etcd://" + host + "/other?ca=" + files.CA + "&cert=" + files.Cert + "&key=" + files.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenEtcd(context.Background(), o)
	if err != nil {
		t.Fatalf("an engine with the member's CA and a certificate of it: %v", err)
	}
	defer c.Close()
	if err := c.Update(context.Background(), func(tx Txn) error { return tx.Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
}

// TestEtcdMembersAdmitOnlyTheirCA: a member with TLS serves only clients
// with a certificate of its CA: not plain connections, not TLS without a
// certificate, not a certificate of another secret's CA.
func TestEtcdMembersAdmitOnlyTheirCA(t *testing.T) {
	e := newTestEtcd(t).(*Etcd)
	ctx := context.Background()
	endpoints := e.cli.Endpoints()
	other, err := testEtcdTLS(filepath.Join(t.TempDir(), "other"), bytes.Repeat([]byte("o"), 32))
	if err != nil {
		t.Fatal(err)
	}
	otherTLS, err := other.clientTLS()
	if err != nil {
		t.Fatal(err)
	}
	otherTLS.RootCAs = e.tls.RootCAs // it trusts the member; the member must not trust it
	noCert := e.tls.Clone()
	noCert.Certificates = nil
	for name, cfg := range map[string]*tls.Config{"plain": nil, "TLS without a certificate": noCert, "another CA's certificate": otherTLS} {
		eps := endpoints
		if cfg == nil {
			eps = []string{strings.Replace(endpoints[0], "https://", "http://", 1)}
		}
		c, err := OpenEtcd(ctx, EtcdOptions{Endpoints: eps, TLS: cfg, DialTimeout: time.Second})
		if err == nil {
			c.Close()
			t.Errorf("%s: served", name)
		}
	}
}
