package braid_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/testcluster"
)

// An Atomic create that fails (an OSD out of space) leaves the file it
// would have replaced whole, gives a new name nothing, and frees the
// objects it wrote; one that succeeds replaces the old file in one step.
func TestAtomicCreateFailsWhole(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, CapacityBytes: 4 << 20})
	cl := c.Dial()
	old := randBytes(rand.New(rand.NewPCG(21, 22)), 1<<20)
	put(t, cl, "/f", "ec:4+2,unit=64KiB", old)
	objects := c.ObjectFiles()
	for _, name := range []string{"/f", "/new"} {
		f, err := cl.Create(ctx, name, braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1, Atomic: true})
		if err != nil {
			t.Fatal(err)
		}
		_, werr := f.ReadFrom(io.LimitReader(zeroReader{}, 64<<20))
		cerr := f.Close()
		if !errors.Is(werr, braid.ErrNoSpace) && !errors.Is(cerr, braid.ErrNoSpace) {
			t.Fatalf("%s: writing past capacity: write %v, close %v; want ErrNoSpace", name, werr, cerr)
		}
	}
	mustRead(t, cl, "/f", "old file after a failed replacement", old)
	if _, err := cl.Stat(ctx, "/new"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("failed new create left a name: %v", err)
	}
	waitObjects(t, c, objects)

	// Abort (the source failed): nothing is named, nothing is left.
	f, err := cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 300<<10), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Abort(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, cl, "/f", "old file after an aborted replacement", old)
	waitObjects(t, c, objects)

	// Success replaces the old file (whose objects go).
	repl := randBytes(rand.New(rand.NewPCG(23, 24)), 300<<10)
	f, err = cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(repl, 0); err != nil {
		t.Fatal(err)
	}
	mustRead(t, cl, "/f", "old file while its replacement is written", old)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, cl, "/f", "replaced file", repl)
	waitObjects(t, c, objects)
}

// A client that dies while writing an Atomic create leaves nothing: its
// lease runs out and the unnamed file is deleted with its objects.
func TestAtomicCreateOfDeadClientIsFreed(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	dying, err := braid.Dial(ctx, c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	f, err := dying.Create(ctx, "/x", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if c.ObjectFiles() == 0 {
		t.Fatal("test setup: the synced file has no objects")
	}
	dying.Close() // the client is gone; its lease is no longer renewed
	if _, err := cl.Stat(ctx, "/x"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("an unfinished Atomic create has a name: %v", err)
	}
	waitObjects(t, c, 0)
}

func waitObjects(t *testing.T, c *testcluster.Cluster, n int) {
	t.Helper()
	testcluster.Eventually(t, 20*time.Second, func() bool { return c.ObjectFiles() == n },
		func() string { return fmt.Sprintf("%d object files on the OSDs, want %d", c.ObjectFiles(), n) })
}

// Space held by removed files is shown until it is freed, with when.
func TestStatusShowsSpaceOfRemovedFiles(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, DeleteDelay: time.Hour})
	cl := c.Dial()
	put(t, cl, "/f", "ec:4+2,unit=64KiB", make([]byte, 1<<20))
	if err := cl.Remove(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	// Right after an MDS start a removed file is kept as if open (leases
	// live in memory); it is queued for deletion once that is over.
	var pd braid.PendingDelete
	testcluster.Eventually(t, 10*time.Second, func() bool {
		st, err := cl.Status(ctx)
		pd = st.PendingDelete
		return err == nil && pd.Objects > 0
	}, func() string { return fmt.Sprintf("removed file never queued for deletion: %+v", pd) })
	if until := time.Until(time.Unix(0, pd.NextNs)); pd.Objects != 6 || pd.Bytes != 6*256<<10 || until < 50*time.Minute || until > time.Hour {
		t.Fatalf("after removing a 1 MiB ec:4+2 file: pending delete %+v (next in %v), want 6 objects, 1.5 MiB, in about an hour", pd, until)
	}
}

// The space a failed Atomic create's objects hold is shown while they
// await deletion (`braid status`'s "removed files" line), although none
// of it was ever committed: the writer says, as it lets the file go, how
// far its writes reached (they were counted as 0 B).
func TestFailedAtomicCreateShowsItsSpace(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, CapacityBytes: 4 << 20, DeleteDelay: time.Hour})
	cl := c.Dial()
	put(t, cl, "/f", "ec:4+2,unit=64KiB", make([]byte, 1<<20))
	f, err := cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.ReadFrom(io.LimitReader(zeroReader{}, 64<<20))
	if cerr := f.Close(); werr == nil && cerr == nil {
		t.Fatal("writing 64 MiB into 24 MiB of OSDs succeeded")
	}
	var st braid.Status
	testcluster.Eventually(t, 20*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && st.PendingDelete.Objects > 0
	}, func() string { return fmt.Sprintf("the failed create never awaited deletion: %+v", st.PendingDelete) })
	var used int64
	for _, o := range st.OSDs {
		used += o.UsedBytes
	}
	held := used - 6*256<<10 // what /f does not hold
	if st.PendingDelete.Bytes < held/2 || st.PendingDelete.Bytes > used {
		t.Fatalf("a failed create's objects await deletion with %d bytes; the OSDs hold %d bytes besides /f's", st.PendingDelete.Bytes, held)
	}
}

// A repair that cannot find space says so in status instead of retrying
// silently.
func TestRepairWithoutSpaceShowsInStatus(t *testing.T) {
	var full atomic.Bool
	disk := &osd.FaultFS{FS: osd.OSFS{}, Fault: func(op osd.FaultOp, path string) error {
		if full.Load() && op == osd.FaultWrite && strings.HasSuffix(path, ".dat") {
			return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
		}
		return nil
	}}
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, OSDFS: disk, OSDOutAfter: 3 * time.Second})
	cl := c.Dial()
	put(t, cl, "/f", "ec:2+1,unit=64KiB", make([]byte, 1<<20))
	full.Store(true) // every disk is full from now on
	fi, err := cl.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	c.StopOSD(osdIndex(c, fi.Layout.Components[0].OSD))
	var st braid.Status
	testcluster.Eventually(t, 30*time.Second, func() bool {
		var err error
		st, err = cl.Status(ctx)
		for _, p := range st.Problems {
			if strings.Contains(p, "out of space") {
				return err == nil
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no out-of-space problem in status: %q %+v", st.Problems, st.Repair) })
}
