package braid_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// TestRemovedFileReadableUntilDeleted: a handle opened before a file is
// removed (or replaced) keeps reading the old data; later the objects are
// really deleted from every OSD.
func TestRemovedFileReadableUntilDeleted(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	old := randBytes(rand.New(rand.NewPCG(21, 22)), 3<<20)
	put(t, cl, "/f", "ec:4+2,unit=64KiB", old)
	r, err := cl.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	put(t, cl, "/f", "ec:4+2,unit=64KiB", []byte("replacement"))
	if err := cl.Remove(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(old))
	if _, err := r.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "old handle after replace and remove", got, old)
	// The replaced file is an orphan while the handle is open (POSIX):
	// its objects go once the handle closes.
	if c.ObjectFiles() == 0 {
		t.Fatal("objects of a file still open were deleted")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 20*time.Second, func() bool { return c.ObjectFiles() == 0 },
		func() string { return fmt.Sprintf("%d objects of removed files not deleted", c.ObjectFiles()) })
}

// TestRewritesOfOneStripeStayConsistent writes the same stripes over and
// over without waiting, then reads with each OSD treated as lost.
func TestRewritesOfOneStripeStayConsistent(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(31, 32))
	const spec = "ec:4+2,unit=16KiB"
	f, err := cl.Create(ctx, "/r", braid.CreateOptions{Layout: spec, SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	var last []byte
	for i := 0; i < 50; i++ {
		last = randBytes(rng, 2*64<<10) // two whole stripes
		if _, err := f.WriteAt(last, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustReadEachOSDDown(t, c, cl, "/r", "rewritten stripes", last)
}

// TestConcurrentReadersAndWriter shares one handle between a writer and
// readers (run under -race).
func TestConcurrentReadersAndWriter(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	f, err := cl.Create(ctx, "/cc", braid.CreateOptions{Layout: "ec:4+2,unit=16KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte{0xab}, 10_000)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 200; i++ {
			if _, err := f.WriteAt(block, int64(i)*10_000); err != nil {
				errs <- err
				return
			}
		}
	}()
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 10_000)
			for i := 0; i < 100; i++ {
				n, err := f.ReadAt(buf, int64(i%50)*10_000)
				if err != nil && n == 0 {
					continue // not written yet
				}
				if !bytes.Equal(buf[:n], block[:n]) {
					errs <- errors.New("reader saw bytes never written")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCommitAfterLayoutChangeRefused: a writer whose file got a new layout
// while it was writing learns so at Close instead of losing data silently.
func TestCommitAfterLayoutChangeRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	f, err := cl.Create(ctx, "/lc", braid.CreateOptions{Layout: "ec:4+2", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 100_000), 0); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetLayout(ctx, "/lc", "mirror:2"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err == nil {
		t.Fatal("close after the layout changed reported success")
	}
}

// TestCrashedWriterBytesNeverReappear: bytes a writer sent past the size
// but never committed (it crashed) read as zeros when the file grows, and
// an append into that stripe keeps parity right.
func TestCrashedWriterBytesNeverReappear(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	const spec = "ec:4+2,unit=16KiB"
	base := randBytes(rand.New(rand.NewPCG(41, 42)), 100_000)
	put(t, cl, "/cw", spec, base)
	// The crashed writer has a client of its own: a live handle would
	// hand its writes over (with the size they reach) when another
	// writer asks for their stripes; a dead one hands over nothing.
	dead := c.Dial()
	crashed, err := dead.OpenFile(ctx, "/cw", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.WriteAt(bytes.Repeat([]byte{0xee}, 150_000), 100_000); err != nil {
		t.Fatal(err)
	}
	if _, err := crashed.ReadAt(make([]byte, 1), 0); err != nil { // pushes the writes to the OSDs
		t.Fatal(err)
	}
	// The writer dies here: no Close, no commit; the size stays 100_000.
	dead.Close()
	g, err := cl.OpenFile(ctx, "/cw", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Truncate(180_000); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("tail"), 200_000); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{}, base...), make([]byte, 100_000)...), "tail"...)
	for i := -1; i < len(c.OSDs); i++ {
		if i >= 0 {
			c.StopOSD(i)
		}
		mustRead(t, cl, "/cw", fmt.Sprintf("file after crashed writer, grow and append, OSD %d lost", i), want)
		if i >= 0 {
			c.RestartOSD(i)
		}
	}
}
