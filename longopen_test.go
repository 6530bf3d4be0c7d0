package braid_test

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// Handles stay valid for as long as they are open: a writer and a reader
// kept open across several capability lifetimes go on writing (full and
// partial stripes, truncation, sync) and reading, no component is ever
// marked dirty, and the file reads back exactly.
func TestHandlesOutliveCapabilities(t *testing.T) {
	const capTTL = 40 * time.Millisecond
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, CapTTL: capTTL})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(31, 32))
	w, err := cl.Create(ctx, "/long", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	model := randBytes(rng, 1<<20)
	if _, err := w.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Open(ctx, "/long")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	for round := 0; time.Since(start) < 5*capTTL; round++ {
		if round > 10_000 {
			t.Fatal("test loop bound reached")
		}
		switch round % 4 {
		case 0: // a partial-stripe overwrite of committed data (staged)
			off := rng.Int64N(int64(len(model)) - 5000)
			p := randBytes(rng, 5000)
			copy(model[off:], p)
			if _, err := w.WriteAt(p, off); err != nil {
				t.Fatalf("round %d (%v in): partial write: %v", round, time.Since(start), err)
			}
		case 1: // a full stripe past the end
			p := randBytes(rng, 256<<10)
			if _, err := w.WriteAt(p, int64(len(model))); err != nil {
				t.Fatalf("round %d: full-stripe write: %v", round, err)
			}
			model = append(model, p...)
		case 2: // truncation, down and back up
			n := len(model) - rng.IntN(100<<10)
			if err := w.Truncate(int64(n)); err != nil {
				t.Fatalf("round %d (%v in): truncate: %v", round, time.Since(start), err)
			}
			model = model[:n]
		case 3:
			if err := w.Sync(); err != nil {
				t.Fatalf("round %d (%v in): sync: %v", round, time.Since(start), err)
			}
			got := make([]byte, 64<<10)
			// The reader sees the size it opened with (close-to-open).
			off := rng.Int64N(min(r.Size(), int64(len(model))) - int64(len(got)))
			if _, err := r.ReadAt(got, off); err != nil {
				t.Fatalf("round %d (%v in): read through a long-open reader: %v", round, time.Since(start), err)
			}
			if !bytes.Equal(got, model[off:off+int64(len(got))]) {
				t.Fatalf("round %d: long-open reader read wrong bytes at %d", round, off)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close after %v: %v", time.Since(start), err)
	}
	if d := dirtyOf(t, cl, "/long"); len(d) != 0 {
		t.Fatalf("components %v marked dirty by capability expiry", d)
	}
	mustRead(t, cl, "/long", "file written across capability lifetimes", model)
	checkConsistent(t, cl, "after long-open handles")
}
