package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/auth"
)

// engines opens each embedded engine on a path in dir; tests hold both to
// one contract.
var engines = []struct {
	name string
	open func(path string) (Engine, error)
}{
	{"pebble", func(path string) (Engine, error) { return OpenPebble(path, slog.New(slog.DiscardHandler)) }},
	{"bolt", func(path string) (Engine, error) { return OpenBolt(path) }},
	{"etcd", openTestEtcd},
}

// openTestEtcd runs a one-member etcd cluster with its data in path (so a
// second open finds what the first wrote) and returns an engine over it.
func openTestEtcd(path string) (Engine, error) {
	client, peer, err := twoFreePorts()
	if err != nil {
		return nil, err
	}
	files, err := testEtcdTLS(path+"-tls", testEtcdSecret)
	if err != nil {
		return nil, err
	}
	return OpenEmbeddedEtcd(context.Background(), EtcdMember{Name: "m", Dir: path,
		ClientURL: "https://" + client, PeerURL: "https://" + peer, TLS: files}, "")
}

var testEtcdSecret = bytes.Repeat([]byte("s"), 32)

// testEtcdTLS writes a member's TLS material, of the CA secret derives,
// into dir.
func testEtcdTLS(dir string, secret []byte) (*EtcdTLSFiles, error) {
	pki, err := auth.DeriveEtcdPKI(secret, "m", []string{"127.0.0.1"}, time.Now())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f := &EtcdTLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "member.pem"), Key: filepath.Join(dir, "member.key")}
	for path, b := range map[string][]byte{f.CA: pki.CA, f.Cert: pki.Cert, f.Key: pki.Key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// twoFreePorts asks the OS for two free loopback ports.
func twoFreePorts() (string, string, error) {
	var addrs []string
	for i := 0; i < 2; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs[0], addrs[1], nil
}

func TestEngines(t *testing.T) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) { testEngine(t, eng.open) })
	}
}

func testEngine(t *testing.T, open func(string) (Engine, error)) {
	path := filepath.Join(t.TempDir(), "meta")
	e, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Concurrent read-modify-write transactions on one counter lose nothing.
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_ = e.Update(ctx, func(tx Txn) error {
				v, _ := tx.Get([]byte("n"))
				var n int
				fmt.Sscan(string(v), &n)
				if err := tx.Put([]byte("n"), []byte(fmt.Sprint(n+1))); err != nil {
					return err
				}
				return tx.Put([]byte(fmt.Sprintf("p/%02d", i)), []byte("x"))
			})
		}(i)
	}
	wg.Wait()
	// An aborted transaction leaves nothing behind.
	boom := errors.New("boom")
	if err := e.Update(ctx, func(tx Txn) error { _ = tx.Put([]byte("p/zz"), nil); return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	e.Close()
	e, err = open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	_ = e.View(ctx, func(r Reader) error {
		v, _ := r.Get([]byte("n"))
		if string(v) != "20" {
			t.Errorf("counter %q after reopen, want 20", v)
		}
		var keys []string
		_ = r.Scan([]byte("p/"), PrefixEnd([]byte("p/")), func(k, v []byte) bool {
			keys = append(keys, string(k))
			return len(keys) < 5
		})
		if len(keys) != 5 || keys[0] != "p/00" || keys[4] != "p/04" {
			t.Errorf("scan = %v", keys)
		}
		if v, _ := r.Get([]byte("p/zz")); v != nil {
			t.Error("aborted write visible")
		}
		return nil
	})
	testExpect(t, e)
}

// testExpect: an Update fenced by WithExpect commits while the key holds
// the value, with and without reading first, and is refused with
// ErrFenced, writing nothing, once it does not.
func testExpect(t *testing.T, e Engine) {
	ctx := context.Background()
	put := func(ctx context.Context, k, v string, read bool) error {
		return e.Update(ctx, func(tx Txn) error {
			if read {
				if _, err := tx.Get([]byte(k)); err != nil {
					return err
				}
			}
			return tx.Put([]byte(k), []byte(v))
		})
	}
	if err := put(ctx, "fence", "epoch-1", false); err != nil {
		t.Fatal(err)
	}
	at1 := WithExpect(ctx, []byte("fence"), []byte("epoch-1"))
	for _, read := range []bool{false, true} {
		if err := put(at1, "fenced/a", fmt.Sprint("read=", read), read); err != nil {
			t.Fatalf("fenced by what holds (read first %v): %v", read, err)
		}
	}
	if err := put(ctx, "fence", "epoch-2", false); err != nil {
		t.Fatal(err)
	}
	for _, read := range []bool{false, true} {
		if err := put(at1, "fenced/b", "x", read); !errors.Is(err, ErrFenced) {
			t.Fatalf("fenced by a changed key (read first %v): %v, want ErrFenced", read, err)
		}
	}
	_ = e.View(ctx, func(r Reader) error {
		if v, _ := r.Get([]byte("fenced/b")); v != nil {
			t.Error("a fenced-off write is visible")
		}
		if v, _ := r.Get([]byte("fenced/a")); string(v) != "read=true" {
			t.Errorf("fenced/a = %q", v)
		}
		return nil
	})
}

func TestRetry(t *testing.T) {
	n := 0
	err := Retry(context.Background(), func() error {
		n++
		if n < 3 {
			return ErrConflict
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if err := Retry(context.Background(), func() error { return ErrConflict }); !errors.Is(err, ErrConflict) {
		t.Fatal("endless conflict not reported")
	}
}

// An engine with injected conflicts runs some attempts twice and rolls
// the first back: transactions still take effect exactly once, an error
// of fn's own is returned as is, and effects outside the transaction show
// the extra runs.
func TestWithConflicts(t *testing.T) {
	b, err := OpenBolt(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	e := WithConflicts(b, 1, 2)
	defer e.Close()
	ctx := context.Background()
	runs := 0
	for range 50 {
		err := e.Update(ctx, func(tx Txn) error {
			runs++
			v, _ := tx.Get([]byte("n"))
			var n int
			fmt.Sscan(string(v), &n)
			return tx.Put([]byte("n"), []byte(fmt.Sprint(n+1)))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	_ = e.View(ctx, func(r Reader) error { got, _ = r.Get([]byte("n")); return nil })
	if string(got) != "50" {
		t.Fatalf("counter %q after 50 increments with conflicts, want 50", got)
	}
	// (Each conflict runs fn at least once more; bbolt's group commit
	// runs a failing update twice.)
	if c := Conflicts(e); c == 0 || runs < 50+c {
		t.Fatalf("%d runs for 50 updates and %d conflicts", runs, c)
	}
	boom := errors.New("boom")
	for range 10 {
		if err := e.Update(ctx, func(tx Txn) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("fn's own error came back as %v", err)
		}
	}
}

// A transaction reads its own writes, by key and by scan, and deletes
// hide keys from both.
func TestEnginesReadOwnWrites(t *testing.T) {
	forEachEngine(t, func(t *testing.T, name string, e Engine) {
		ctx := context.Background()
		put := func(tx Txn, k string) { _ = tx.Put([]byte(k), []byte("v"+k)) }
		if err := e.Update(ctx, func(tx Txn) error { put(tx, "a/1"); put(tx, "a/3"); return nil }); err != nil {
			t.Fatal(err)
		}
		err := e.Update(ctx, func(tx Txn) error {
			put(tx, "a/2")
			_ = tx.Delete([]byte("a/3"))
			if v, _ := tx.Get([]byte("a/2")); string(v) != "va/2" {
				t.Errorf("own write read as %q", v)
			}
			if v, _ := tx.Get([]byte("a/3")); v != nil {
				t.Errorf("own delete read as %q", v)
			}
			many, err := GetMany(tx, [][]byte{[]byte("a/3"), []byte("a/1"), []byte("none"), []byte("a/2")})
			if err != nil || fmt.Sprintf("%q", many) != `["" "va/1" "" "va/2"]` {
				t.Errorf("GetMany in transaction = %q, %v", many, err)
			}
			var keys []string
			_ = tx.Scan([]byte("a/"), []byte("a0"), func(k, v []byte) bool { keys = append(keys, string(k)+"="+string(v)); return true })
			if fmt.Sprint(keys) != "[a/1=va/1 a/2=va/2]" {
				t.Errorf("scan in transaction = %v", keys)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// Updates grouped into one commit with one that fails: the others take
// effect, the failing one leaves nothing, each caller gets its own result.
func TestEnginesGroupWithAFailure(t *testing.T) {
	forEachEngine(t, func(t *testing.T, name string, e Engine) {
		ctx := context.Background()
		boom := errors.New("boom")
		var wg sync.WaitGroup
		errs := make([]error, 64)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = e.Update(ctx, func(tx Txn) error {
					if err := tx.Put(fmt.Appendf(nil, "k/%02d", i), []byte("x")); err != nil {
						return err
					}
					if i%5 == 0 {
						return fmt.Errorf("update %d: %w", i, boom)
					}
					return nil
				})
			}()
		}
		wg.Wait()
		_ = e.View(ctx, func(r Reader) error {
			for i, err := range errs {
				v, _ := r.Get(fmt.Appendf(nil, "k/%02d", i))
				if failing := i%5 == 0; failing != errors.Is(err, boom) || failing != (v == nil) {
					t.Errorf("update %d: err %v, stored %q", i, err, v)
				}
			}
			return nil
		})
	})
}

// A View sees one state: an update committing meanwhile changes neither
// what it has read nor what it reads next.
func TestEnginesViewIsASnapshot(t *testing.T) {
	forEachEngine(t, func(t *testing.T, name string, e Engine) {
		ctx := context.Background()
		set := func(v string) error {
			return e.Update(ctx, func(tx Txn) error {
				_ = tx.Put([]byte("a"), []byte(v))
				return tx.Put([]byte("b"), []byte(v))
			})
		}
		if err := set("1"); err != nil {
			t.Fatal(err)
		}
		if name == "bolt" {
			return // bbolt: an Update inside a View on one goroutine deadlocks (its commit waits for the reader)
		}
		err := e.View(ctx, func(r Reader) error {
			a, _ := r.Get([]byte("a"))
			if err := set("2"); err != nil {
				return err
			}
			b, _ := r.Get([]byte("b"))
			if string(a) != "1" || string(b) != "1" {
				t.Errorf("view read a=%q b=%q across a commit", a, b)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkCreateTxn runs transactions shaped like a create (three reads,
// four writes) on each engine, from one and from eight goroutines.
func BenchmarkCreateTxn(b *testing.B) {
	for _, eng := range engines {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/%d", eng.name, par), func(b *testing.B) {
				e, err := eng.open(filepath.Join(b.TempDir(), "meta"))
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				ctx := context.Background()
				var next atomic.Int64
				val := make([]byte, 200)
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						i := next.Add(1)
						err := e.Update(ctx, func(tx Txn) error {
							_, _ = tx.Get([]byte("i/dir"))
							_, _ = tx.Get(fmt.Appendf(nil, "d/dir/f%09d", i))
							_, _ = tx.Get([]byte("c/next-ino"))
							_ = tx.Put([]byte("c/next-ino"), fmt.Append(nil, i))
							_ = tx.Put(fmt.Appendf(nil, "i/%09d", i), val)
							_ = tx.Put(fmt.Appendf(nil, "d/dir/f%09d", i), fmt.Append(nil, i))
							return tx.Put([]byte("i/dir"), val)
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// An update whose fn panics fails alone, with the panic raised in its own
// caller; the updates grouped with it commit, and the engine goes on.
func TestEnginesSurviveAPanickingUpdate(t *testing.T) {
	forEachEngine(t, func(t *testing.T, name string, e Engine) {
		ctx := context.Background()
		var wg sync.WaitGroup
		panics := make([]any, 32)
		errs := make([]error, 32)
		for i := range panics {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { panics[i] = recover() }()
				errs[i] = e.Update(ctx, func(tx Txn) error {
					if err := tx.Put(fmt.Appendf(nil, "k/%02d", i), []byte("x")); err != nil {
						return err
					}
					if i%7 == 3 {
						panic(fmt.Sprintf("update %d", i))
					}
					return nil
				})
			}()
		}
		wg.Wait()
		_ = e.View(ctx, func(r Reader) error {
			for i := range panics {
				v, _ := r.Get(fmt.Appendf(nil, "k/%02d", i))
				if bad := i%7 == 3; bad != (panics[i] == fmt.Sprintf("update %d", i)) || bad == (v != nil) || errs[i] != nil {
					t.Errorf("update %d: panic %v, err %v, stored %q", i, panics[i], errs[i], v)
				}
			}
			return nil
		})
		if err := e.Update(ctx, func(tx Txn) error { return tx.Put([]byte("after"), []byte("y")) }); err != nil {
			t.Fatalf("update after the panics: %v", err)
		}
	})
}

// forEachEngine runs fn as a subtest on each embedded engine, opened
// fresh.
func forEachEngine(t *testing.T, fn func(t *testing.T, name string, e Engine)) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e, err := eng.open(filepath.Join(t.TempDir(), "meta"))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			fn(t, eng.name, e)
		})
	}
}
