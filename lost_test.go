package braid_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/testcluster"
)

// objectPath is where OSD i keeps a component object's file with the
// given extension ("dat" or "sum"); internal/osd/doc.go has the format.
func objectPath(c *testcluster.Cluster, i int, ino uint64, comp int, ext string) string {
	return filepath.Join(c.OSDDir(i), "objects", fmt.Sprintf("%02x", ino&0xff), fmt.Sprintf("%016x.%d.%s", ino, comp, ext))
}

// unitHolding returns the file's layout and the component holding the
// data unit at file offset off.
func unitHolding(t *testing.T, cl *braid.Client, p string, off int64) (braid.FileInfo, int, uint32) {
	t.Helper()
	fi, err := cl.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := layout.Parse(fi.Layout.Spec)
	if err != nil {
		t.Fatal(err)
	}
	lay := layout.Layout{Spec: spec, Groups: fi.Layout.Groups, Version: fi.Layout.Version}
	for _, comp := range fi.Layout.Components {
		lay.OSDs = append(lay.OSDs, comp.OSD)
	}
	var comp int
	lay.Spans(off, 1, func(s layout.Span) bool {
		comp = lay.UnitOf(s.Stripe, s.Unit).Component
		return false
	})
	return fi, comp, lay.OSDs[comp]
}

// loseObject deletes a component object's files on its OSD's disk (a
// lost file, a restored backup, an fsck) and restarts the OSD so nothing
// of it is left in memory.
func loseObject(t *testing.T, c *testcluster.Cluster, ino uint64, comp int, id uint32) int {
	t.Helper()
	i := osdIndex(c, id)
	for _, ext := range []string{"dat", "sum"} {
		if err := os.Remove(objectPath(c, i, ino, comp, ext)); err != nil {
			t.Fatal(err)
		}
	}
	c.RestartOSD(i)
	return i
}

// openOverALostObject puts data at /f as spec on a cluster that repairs
// nothing by itself, loses the object holding its first data unit, and
// opens /f for writing; comp is the lost component.
func openOverALostObject(t *testing.T, spec string, data []byte) (c *testcluster.Cluster, cl *braid.Client, f *braid.File, comp int) {
	t.Helper()
	c = testcluster.Start(t, testcluster.Options{OSDs: 6, RepairWorkers: -1})
	cl = c.Dial()
	put(t, cl, "/f", spec, data)
	fi, comp, id := unitHolding(t, cl, "/f", 0)
	loseObject(t, c, fi.Ino, comp, id)
	f, err := cl.OpenFile(ctx, "/f", true)
	if err != nil {
		t.Fatal(err)
	}
	return c, cl, f, comp
}

func dirtyOf(t *testing.T, cl *braid.Client, p string) []uint32 {
	t.Helper()
	fi, err := cl.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var dirty []uint32
	for _, comp := range fi.Layout.Components {
		if comp.Dirty {
			dirty = append(dirty, uint32(comp.Index))
		}
	}
	return dirty
}

// A component object gone from its OSD's disk is a lost component, never
// zeros: reads reconstruct around it, it is marked dirty, status says
// degraded until a repair worker has rewritten it, and then the object on disk
// holds the original bytes again. Coded and mirrored files alike.
func TestLostComponentIsReconstructed(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, RepairWorkers: -1})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(11, 12))
	files := map[string][]byte{"/ec": randBytes(rng, 3<<20+5), "/small": randBytes(rng, 5000)}
	put(t, cl, "/ec", "ec:4+2,unit=1MiB", files["/ec"])
	put(t, cl, "/small", "", files["/small"]) // mirror:3 by its size
	type lost struct {
		osd  int
		ino  uint64
		comp int
	}
	var losses []lost
	for p := range files {
		fi, comp, id := unitHolding(t, cl, p, 0)
		losses = append(losses, lost{loseObject(t, c, fi.Ino, comp, id), fi.Ino, comp})
	}
	for p, data := range files {
		mustRead(t, cl, p, p+" with its first data unit's object gone", data)
		if d := dirtyOf(t, cl, p); len(d) != 1 {
			t.Fatalf("%s: dirty components %v after a read found one lost", p, d)
		}
	}
	st, err := cl.Status(ctx)
	if err != nil || st.Health != mdsproto.HealthDegraded {
		t.Fatalf("status with lost components: %s (%v), problems %q", st.Health, err, st.Problems)
	}
	startHealer(t, cl)
	waitHealthy(t, cl, 30*time.Second)
	for _, l := range losses {
		p := "/ec"
		if l.ino != mustIno(t, cl, "/ec") {
			p = "/small"
		}
		want := files[p][:min(len(files[p]), 1<<20)]
		got := make([]byte, len(want))
		if _, _, err := c.OSDs[l.osd].Store().Read(osd.ObjKey{Ino: l.ino, Comp: uint32(l.comp)}, ^uint64(0), 0, got); err != nil {
			t.Fatalf("%s: rebuilt object: %v", p, err)
		}
		mustEqual(t, p+": rebuilt object", got, want)
	}
	checkConsistent(t, cl, "after repairing")
}

// startHealer runs a repair worker from the test's client until the test ends
// (clusters started with RepairWorkers: -1 repair nothing by themselves).
// startHealer runs a repair worker until the test ends or the returned stop.
func startHealer(t *testing.T, cl *braid.Client) (stop func()) {
	hctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cl.Heal(hctx, braid.HealOptions{Name: "test", Poll: 20 * time.Millisecond}) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func mustIno(t *testing.T, cl *braid.Client, p string) uint64 {
	t.Helper()
	fi, err := cl.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Ino
}

// Scrub never treats a unit it cannot vouch for as data: with a data
// unit's object gone it rebuilds that unit from the others instead of
// recomputing parity from zeros (which would make the loss permanent).
func TestScrubRebuildsLostComponentFromTheRest(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(13, 14)), 3<<20)
	put(t, cl, "/f", "ec:4+2,unit=1MiB", data)
	fi, comp, id := unitHolding(t, cl, "/f", 0)
	i := loseObject(t, c, fi.Ino, comp, id)
	if _, err := cl.Scrub(ctx, "/f"); err != nil {
		t.Fatal(err)
	}
	waitScrubbed(t, cl, 1)
	waitHealthy(t, cl, 30*time.Second)
	got := make([]byte, 1<<20)
	if _, _, err := c.OSDs[i].Store().Read(osd.ObjKey{Ino: fi.Ino, Comp: uint32(comp)}, ^uint64(0), 0, got); err != nil {
		t.Fatal(err)
	}
	mustEqual(t, "lost unit after scrub", got, data[:1<<20])
	mustRead(t, cl, "/f", "after scrub", data)
	checkConsistent(t, cl, "after scrub")
}

func waitScrubbed(t *testing.T, cl *braid.Client, n int64) {
	t.Helper()
	testcluster.Eventually(t, 30*time.Second, func() bool {
		st, err := cl.Status(ctx)
		return err == nil && st.Repair.ScrubTaken >= n && st.Repair.ScrubQueued == 0 && st.Repair.Active == 0
	}, func() string { return "scrub did not finish" })
}

// A component object cut short on disk is lost beyond its new end.
func TestShortComponentIsLost(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, RepairWorkers: -1})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(15, 16)), 6<<20)
	put(t, cl, "/f", "ec:4+2,unit=1MiB", data)
	fi, comp, id := unitHolding(t, cl, "/f", 4<<20) // a unit of the second stripe
	i := osdIndex(c, id)
	if err := os.Truncate(objectPath(c, i, fi.Ino, comp, "dat"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(objectPath(c, i, fi.Ino, comp, "sum"), 4096+4*256); err != nil {
		t.Fatal(err)
	}
	c.RestartOSD(i)
	mustRead(t, cl, "/f", "with a component cut short", data)
	if d := dirtyOf(t, cl, "/f"); len(d) != 1 || int(d[0]) != comp {
		t.Fatalf("dirty %v, want [%d]", d, comp)
	}
}

// Holes are not losses: a sparse file reads its holes as zeros and marks
// nothing dirty.
func TestSparseHolesAreNotLost(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, RepairWorkers: -1})
	cl := c.Dial()
	f, err := cl.Create(ctx, "/sparse", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 8<<20)
	for _, w := range []struct {
		off  int64
		text string
	}{{3 << 20, "in the middle"}, {8<<20 - 4, "tail"}} {
		copy(want[w.off:], w.text)
		if _, err := f.WriteAt([]byte(w.text), w.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := cl.Create(ctx, "/grown", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if err := h.Truncate(5 << 20); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	grown := make([]byte, 5<<20)
	copy(grown, "head")
	mustRead(t, cl, "/sparse", "sparse file", want)
	mustRead(t, cl, "/grown", "file grown by truncate", grown)
	for _, p := range []string{"/sparse", "/grown"} {
		if d := dirtyOf(t, cl, p); len(d) != 0 {
			t.Fatalf("%s: holes marked components %v dirty", p, d)
		}
	}
	checkConsistent(t, cl, "sparse files")
}

// Check walks every kind of entry of a real tree (symlinks hold no data
// and are skipped, not an error), and a scrub of a tree that changes
// while it runs still finishes: every file it queued is taken off the
// queue, whether scrubbed, failed or removed meanwhile.
func TestCheckAndScrubWalkARealTree(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, RepairWorkers: -1})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(17, 18))
	if err := cl.Mkdir(ctx, "/t/sub", true); err != nil {
		t.Fatal(err)
	}
	put(t, cl, "/t/a", "ec:4+2,unit=64KiB", randBytes(rng, 300<<10))
	put(t, cl, "/t/sub/b", "", randBytes(rng, 3000))
	put(t, cl, "/t/sub/gone", "", randBytes(rng, 3000))
	sub, err := cl.Stat(ctx, "/t/sub")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Symlink(ctx, sub.Ino, "link", "../a", 0, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := cl.Check(ctx, "/t")
	if err != nil || rep.Files != 3 || rep.Skipped != 1 || len(rep.Problems) != 0 {
		t.Fatalf("check of a tree with a symlink: %+v, %v", rep, err)
	}
	before, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cl.Scrub(ctx, "/t")
	if err != nil || n != 3 {
		t.Fatalf("scrub queued %d files (%v), want 3", n, err)
	}
	if err := cl.Remove(ctx, "/t/sub/gone"); err != nil {
		t.Fatal(err)
	}
	startHealer(t, cl)
	var st braid.Status
	testcluster.Eventually(t, 30*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && st.Repair.ScrubQueued == 0 && st.Repair.Active == 0 && st.Repair.ScrubTaken-before.Repair.ScrubTaken == n
	}, func() string { return fmt.Sprintf("scrub of the tree never finished: %+v", st.Repair) })
	// The removed file may still be scrubbed: an unlinked inode lives on
	// while it may be open (and right after an MDS start it is assumed so).
	if got := st.Repair.ScrubbedFiles - before.Repair.ScrubbedFiles; got < 2 {
		t.Fatalf("%d files scrubbed, want at least the 2 still there", got)
	}
}

// An object whose checksum header is damaged (a crash before its first
// fsync, decay) can be neither read nor written in place: the catch-up
// replaces it whole instead of failing forever.
func TestDamagedObjectHeaderIsRebuilt(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(19, 20)), 3<<20)
	put(t, cl, "/f", "ec:4+2,unit=1MiB", data)
	fi, comp, id := unitHolding(t, cl, "/f", 0)
	i := osdIndex(c, id)
	if err := os.Truncate(objectPath(c, i, fi.Ino, comp, "sum"), 10); err != nil {
		t.Fatal(err)
	}
	c.RestartOSD(i)
	mustRead(t, cl, "/f", "with a damaged object header", data)
	waitHealthy(t, cl, 30*time.Second)
	if d := dirtyOf(t, cl, "/f"); len(d) != 0 {
		t.Fatalf("components %v still dirty", d)
	}
	got := make([]byte, 1<<20)
	if _, _, err := c.OSDs[i].Store().Read(osd.ObjKey{Ino: fi.Ino, Comp: uint32(comp)}, ^uint64(0), 0, got); err != nil {
		t.Fatalf("rebuilt object: %v", err)
	}
	mustEqual(t, "rebuilt object", got, data[:1<<20])
}

// A reader whose view predates a truncation by another handle finds the
// objects shorter than it expects; that is no loss, and nothing is marked
// dirty (marking every component would make the file unreadable by
// bookkeeping alone).
func TestStaleReaderAfterTruncationMarksNothing(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, RepairWorkers: -1})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(25, 26)), 3<<20)
	put(t, cl, "/f", "ec:4+2,unit=64KiB", data)
	r, err := cl.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := cl.OpenFile(ctx, "/f", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	_, _ = r.ReadAt(buf, 2<<20) // past the new end: whatever it returns, it is no loss
	if d := dirtyOf(t, cl, "/f"); len(d) != 0 {
		t.Fatalf("a stale reader marked components %v dirty after a truncation", d)
	}
	mustRead(t, cl, "/f", "after the truncation", data[:1<<20])
}

// A write that lands on a lost object recreates it from its own offset
// on: below it the new object holds holes, and it is as long as the MDS
// records, so no read could tell (the simulation found a file reading
// zeros so). The OSD says when a write created the object; a writer that
// finds an object it expected to exist created anew marks the component
// dirty, so it is rebuilt, never read.
func TestWriteOverALostObjectIsNotTrusted(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	data := randBytes(rng, 6<<20)
	c, cl, f, comp := openOverALostObject(t, "ec:4+2,unit=1MiB", data)
	stripe1 := randBytes(rng, 4<<20) // every component, from object offset 1 MiB
	if _, err := f.WriteAt(stripe1, 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(data[:4<<20], stripe1)
	if d := dirtyOf(t, cl, "/f"); !slices.Contains(d, uint32(comp)) {
		t.Fatalf("component %d, recreated by a write over its lost object, is not dirty (dirty: %v)", comp, d)
	}
	mustRead(t, cl, "/f", "after a write recreated a lost object", want)
	stopHealer := startHealer(t, cl)
	waitHealthy(t, cl, 30*time.Second)
	mustRead(t, cl, "/f", "after the rebuild", want)

	// A truncation recreates a lost object as well, all holes.
	fi, comp, id := unitHolding(t, cl, "/f", 0)
	i := loseObject(t, c, fi.Ino, comp, id)
	stopHealer()
	f, err := cl.OpenFile(ctx, "/f", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(5 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if d := dirtyOf(t, cl, "/f"); !slices.Contains(d, uint32(comp)) {
		t.Fatalf("component %d, recreated by a truncation of its lost object on OSD %d, is not dirty (dirty: %v)", comp, i, d)
	}
	mustRead(t, cl, "/f", "after a truncation recreated a lost object", want[:5<<20])
}

// A writer that keeps overwriting part of a stripe whose component object
// was lost does not hold the component's repair back for good: each
// staged write's apply to the lost object fails (it must exist), and the
// writer finishes the write itself, the unit marked dirty, instead of
// leaving its intent to expire. (Repairs wait for a file's intents; a
// writer leaving one behind more often than they expire starved the
// repair: the SIGKILL fault test once stayed degraded for two minutes.)
func TestWriterDoesNotStarveTheRepairOfALostComponent(t *testing.T) {
	data := randBytes(rand.New(rand.NewPCG(31, 32)), 1<<20)
	_, cl, f, _ := openOverALostObject(t, "ec:4+2,unit=64KiB", data)
	stop, done := make(chan struct{}), make(chan error, 1)
	var mu sync.Mutex
	go func() {
		rng := rand.New(rand.NewPCG(33, 34))
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(50 * time.Millisecond):
			}
			b := randBytes(rng, 10<<10)
			off := rng.IntN(64 << 10)
			mu.Lock()
			if _, err := f.WriteAt(b, int64(off)); err != nil {
				mu.Unlock()
				done <- err
				return
			}
			copy(data[off:], b)
			err := f.Sync()
			mu.Unlock()
			if err != nil {
				done <- err
				return
			}
		}
	}()
	var st braid.Status
	testcluster.Eventually(t, 10*time.Second, func() bool { // the writer found the loss
		var err error
		st, err = cl.Status(ctx)
		return err == nil && st.Health != mdsproto.HealthOK
	}, func() string { return fmt.Sprintf("never degraded: %+v", st) })
	startHealer(t, cl)
	waitHealthy(t, cl, 20*time.Second)
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, cl, "/f", "after the repair under a writer", data)
	checkConsistent(t, cl, "after the repair under a writer")
}
