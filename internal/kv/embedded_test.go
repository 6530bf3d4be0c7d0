package kv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// An MDS directory of an older braid holds a bbolt store: OpenEmbedded
// moves every key into Pebble, also after a move cut short by a crash.
func TestOpenEmbeddedMovesBoltStore(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	const keys = 30000 // more than one copy batch
	for _, crash := range []string{"none", "partial copy left", "cut before the rename of meta.db"} {
		t.Run(crash, func(t *testing.T) {
			dir := t.TempDir()
			b, err := OpenBolt(filepath.Join(dir, boltFileName))
			if err != nil {
				t.Fatal(err)
			}
			err = b.Update(ctx, func(tx Txn) error {
				for i := range keys {
					if err := tx.Put(fmt.Appendf(nil, "k%06d", i), fmt.Appendf(nil, "value %d with some bytes", i)); err != nil {
						return err
					}
				}
				return nil
			})
			b.Close()
			if err != nil {
				t.Fatal(err)
			}
			switch crash {
			case "partial copy left":
				p, err := OpenPebble(filepath.Join(dir, movingDirName), log)
				if err != nil {
					t.Fatal(err)
				}
				_ = p.Update(ctx, func(tx Txn) error { return tx.Put([]byte("zz-stray"), []byte("x")) })
				p.Close()
			case "cut before the rename of meta.db":
				// The store in place is complete, and meta.db still there.
				p, err := OpenPebble(filepath.Join(dir, movingDirName), log)
				if err != nil {
					t.Fatal(err)
				}
				src, _ := OpenBolt(filepath.Join(dir, boltFileName))
				if _, err := copyInto(ctx, src, p); err != nil {
					t.Fatal(err)
				}
				src.Close()
				p.Close()
				if err := os.WriteFile(filepath.Join(dir, movingDirName, movedMarker), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(dir, movingDirName), filepath.Join(dir, pebbleDirName)); err != nil {
					t.Fatal(err)
				}
			}
			for open := range 2 { // the second open finds the store moved
				e, err := OpenEmbedded(ctx, dir, log)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				_ = e.View(ctx, func(r Reader) error {
					return r.Scan(nil, nil, func(k, v []byte) bool {
						if want := fmt.Sprintf("k%06d", n); string(k) != want || string(v) != fmt.Sprintf("value %d with some bytes", n) {
							t.Errorf("open %d: key %d is %q=%q", open, n, k, v)
							return false
						}
						n++
						return true
					})
				})
				e.Close()
				if n != keys {
					t.Fatalf("open %d: %d keys after the move, want %d", open, n, keys)
				}
			}
			for _, name := range []string{boltFileName, movingDirName} {
				if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
					t.Errorf("%s left after the move (%v)", name, err)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, boltFileName+movedSuffix)); err != nil {
				t.Errorf("the old store is not kept: %v", err)
			}
		})
	}
}

// A store beside meta.db that the move did not make, or a kept old store
// in the way, stops the MDS with an error instead of a guess.
func TestOpenEmbeddedRefusesToGuess(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, kind := range []string{"another store", "a kept old store"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			b, err := OpenBolt(filepath.Join(dir, boltFileName))
			if err != nil {
				t.Fatal(err)
			}
			_ = b.Update(ctx, func(tx Txn) error { return tx.Put([]byte("k"), []byte("v")) })
			b.Close()
			if kind == "another store" {
				p, err := OpenPebble(filepath.Join(dir, pebbleDirName), log)
				if err != nil {
					t.Fatal(err)
				}
				p.Close()
			} else if err := os.WriteFile(filepath.Join(dir, boltFileName+movedSuffix), []byte("older"), 0o600); err != nil {
				t.Fatal(err)
			}
			if e, err := OpenEmbedded(ctx, dir, log); err == nil {
				e.Close()
				t.Fatal("opened")
			}
			if _, err := os.Stat(filepath.Join(dir, boltFileName)); err != nil {
				t.Fatalf("meta.db was moved: %v", err)
			}
		})
	}
}
