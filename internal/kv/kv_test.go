package kv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

func TestBolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	e, err := OpenBolt(path)
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
	e, err = OpenBolt(path)
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
