package braid_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// healFiles are written by the repairing tests: coded, mirrored, small,
// multi-group and odd-sized files.
var healFiles = []struct {
	path, spec string
	size       int
}{
	{"/ec", "ec:4+2,unit=64KiB", 3<<20 + 17},
	{"/wide", "ec:2+2,unit=32KiB,visit=2", 2<<20 + 5},
	{"/mirror", "mirror:3,unit=64KiB", 700<<10 + 3},
	{"/small", "", 5000},
	{"/empty", "ec:4+2", 0},
}

func writeHealFiles(t *testing.T, cl *braid.Client, seed uint64) map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	out := map[string][]byte{}
	for _, f := range healFiles {
		data := randBytes(rng, f.size)
		put(t, cl, f.path, f.spec, data)
		out[f.path] = data
	}
	return out
}

func checkAll(t *testing.T, cl *braid.Client, files map[string][]byte, what string) {
	t.Helper()
	for p, data := range files {
		mustRead(t, cl, p, what, data)
	}
}

// checkConsistent runs the checker over everything: every stripe must
// decode and every unit agree with the others.
func checkConsistent(t *testing.T, cl *braid.Client, what string) braid.CheckReport {
	t.Helper()
	rep, err := cl.Check(ctx, "/")
	if err != nil {
		t.Fatalf("%s: check: %v", what, err)
	}
	if len(rep.Problems) > 0 || rep.Unverified > 0 {
		t.Fatalf("%s: %d of %d stripes unverified, problems: %q", what, rep.Unverified, rep.Stripes, rep.Problems)
	}
	return rep
}

// waitHealthy polls until the cluster reports health ok with nothing left
// to repair.
func waitHealthy(t *testing.T, cl *braid.Client, timeout time.Duration) braid.Status {
	t.Helper()
	var st braid.Status
	testcluster.Eventually(t, timeout, func() bool {
		var err error
		st, err = cl.Status(ctx)
		return err == nil && st.Health == mdsproto.HealthOK && st.Repair.FilesLeft == 0 && st.Repair.Active == 0
	}, func() string {
		return fmt.Sprintf("health %s, problems %q, repair %+v", st.Health, st.Problems, st.Repair)
	})
	return st
}

func osdIndex(c *testcluster.Cluster, id uint32) int {
	for i, s := range c.OSDs {
		if s != nil && s.ID() == id {
			return i
		}
	}
	return -1
}

// componentsOn counts the files' components placed on OSD id.
func componentsOn(t *testing.T, cl *braid.Client, files map[string][]byte, id uint32) int {
	t.Helper()
	n := 0
	for p := range files {
		fi, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, comp := range fi.Layout.Components {
			if comp.OSD == id {
				n++
			}
		}
	}
	return n
}

// An OSD that stays down past the grace period is out: its components are
// rebuilt on other OSDs, after which the files survive two more failures.
func TestRebuildAfterOSDOut(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 8, OSDOutAfter: 3 * time.Second})
	cl := c.Dial()
	files := writeHealFiles(t, cl, 1)
	ec, err := cl.Stat(ctx, "/ec")
	if err != nil {
		t.Fatal(err)
	}
	victim := ec.Layout.Components[0].OSD // placement is random: take one that holds something
	vi := osdIndex(c, victim)
	c.StopOSD(vi)
	testcluster.Eventually(t, 10*time.Second, func() bool {
		st, err := cl.Status(ctx)
		return err == nil && st.Health == mdsproto.HealthDegraded
	}, func() string { return "health never degraded after an OSD stopped" })
	st := waitHealthy(t, cl, 60*time.Second)
	if n := componentsOn(t, cl, files, victim); n != 0 {
		t.Fatalf("%d components still on the out OSD", n)
	}
	// The counters follow the commit that cleared the last dirty mark.
	testcluster.Eventually(t, 10*time.Second, func() bool {
		st, _ = cl.Status(ctx)
		return st.Repair.FilesDone > 0 && st.Repair.BytesDone > 0
	}, func() string { return fmt.Sprintf("repair progress not reported: %+v", st.Repair) })
	checkAll(t, cl, files, "after rebuild")
	checkConsistent(t, cl, "after rebuild")
	// Full redundancy again: two more failures are survivable.
	var others []int
	for i := range c.OSDs {
		if i != vi && len(others) < 2 {
			others = append(others, i)
		}
	}
	c.StopOSD(others[0])
	c.StopOSD(others[1])
	checkAll(t, cl, files, "after rebuild and two more failures")
}

// An OSD that comes back before it is out catches up on the writes it
// missed; afterwards it is needed (two others down) and has them.
func TestRestartedOSDCatchesUp(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	files := writeHealFiles(t, cl, 2)
	c.StopOSD(1)
	overwriteAll(t, cl, files, 3) // in place: the layouts still name OSD 1
	st, err := cl.Status(ctx)
	if err != nil || st.Health != mdsproto.HealthDegraded {
		t.Fatalf("health %q (err %v) with components that missed writes, want degraded", st.Health, err)
	}
	c.RestartOSD(1)
	waitHealthy(t, cl, 60*time.Second)
	checkConsistent(t, cl, "after catch-up")
	c.StopOSD(2)
	c.StopOSD(4)
	checkAll(t, cl, files, "after catch-up, with two other OSDs down")
}

// overwriteAll rewrites a random range of every file in place and
// appends to it, updating files to match.
func overwriteAll(t *testing.T, cl *braid.Client, files map[string][]byte, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	for p, data := range files {
		f, err := cl.OpenFile(ctx, p, true)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		if len(data) > 0 {
			off = rng.IntN(len(data))
		}
		patch := randBytes(rng, 1+rng.IntN(200<<10))
		if _, err := f.WriteAt(patch, int64(off)); err != nil {
			t.Fatal(err)
		}
		if end := off + len(patch); end > len(data) {
			data = append(data, make([]byte, end-len(data))...)
		}
		copy(data[off:], patch)
		if err := f.Close(); err != nil {
			t.Fatalf("close %s: %v", p, err)
		}
		files[p] = data
	}
}

// Scrub finds blocks flipped on disk and rewrites them from redundancy.
func TestScrubRepairsFlippedBytes(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	files := writeHealFiles(t, cl, 4)
	flipped := 0
	_ = filepath.Walk(c.OSDDir(2), func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".dat") && info.Size() > 100 {
			b, _ := os.ReadFile(p)
			b[len(b)/3] ^= 0x5a
			flipped++
			return os.WriteFile(p, b, 0o644)
		}
		return nil
	})
	if flipped == 0 {
		t.Fatal("test setup: nothing to corrupt on OSD 2")
	}
	checkAll(t, cl, files, "reads over corrupt blocks")
	if n, err := cl.Scrub(ctx, "/"); err != nil || n != int64(len(files)) {
		t.Fatalf("scrub queued %d files, err %v; want %d", n, err, len(files))
	}
	var st braid.Status
	testcluster.Eventually(t, 60*time.Second, func() bool {
		var err error
		st, err = cl.Status(ctx)
		return err == nil && st.Repair.ScrubQueued == 0 && st.Repair.Active == 0 && st.Repair.ScrubbedFiles >= int64(len(files))
	}, func() string { return fmt.Sprintf("scrub not finished: %+v", st.Repair) })
	// Scrub once counted fewer rewritten units than flips (2 of 3, under
	// the race detector with the e2e tests alongside; not pinned down): a
	// component rebuilt whole meanwhile takes its flipped block with it
	// uncounted. What matters is that every stripe checks out, and that
	// reads without two other OSDs, which need the repaired units, work.
	if st.Repair.ScrubRepaired+st.Repair.FilesDone == 0 {
		t.Fatalf("nothing repaired; %d objects were corrupted: %+v", flipped, st.Repair)
	}
	checkConsistent(t, cl, "after scrub")
	// The repaired OSD is now needed: two others are down.
	c.StopOSD(0)
	c.StopOSD(4)
	checkAll(t, cl, files, "after scrub, with two other OSDs down")
}

// Draining an OSD moves every component off it; it can then be stopped
// with nothing lost, even with one more failure.
func TestDrainMovesEverythingOff(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 7})
	cl := c.Dial()
	files := writeHealFiles(t, cl, 5)
	id := c.OSDs[2].ID()
	if err := cl.DrainOSD(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	var st braid.Status
	testcluster.Eventually(t, 60*time.Second, func() bool {
		var err error
		st, err = cl.Status(ctx)
		if err != nil {
			return false
		}
		for _, o := range st.OSDs {
			if o.ID == id {
				return o.Components == 0 && st.Repair.Active == 0 && st.Health == mdsproto.HealthOK
			}
		}
		return false
	}, func() string { return fmt.Sprintf("drain not finished: %+v %q", st.OSDs, st.Problems) })
	if n := componentsOn(t, cl, files, id); n != 0 {
		t.Fatalf("%d components left on the drained OSD", n)
	}
	checkConsistent(t, cl, "after drain")
	c.StopOSD(2)
	c.StopOSD(osdIndex(c, c.OSDs[5].ID()))
	checkAll(t, cl, files, "after drain, drained OSD stopped and one more down")
}

// Added OSDs take new files at once and, in the background, components of
// existing files until the OSDs hold similar amounts.
func TestAddedOSDsAreFilledByRebalancing(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 4, BalanceSlackBytes: 256 << 10})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(6, 6))
	files := map[string][]byte{}
	for i := 0; i < 12; i++ {
		p := fmt.Sprintf("/f%d", i)
		files[p] = randBytes(rng, 1<<20+i*1000)
		put(t, cl, p, "ec:2+1,unit=64KiB", files[p])
	}
	added := []uint32{c.OSDs[c.AddOSD()].ID(), c.OSDs[c.AddOSD()].ID()}
	var st braid.Status
	testcluster.Eventually(t, 60*time.Second, func() bool {
		var err error
		if st, err = cl.Status(ctx); err != nil || st.Repair.Active > 0 || st.Health != mdsproto.HealthOK || st.Repair.Rebalanced == 0 {
			return false // (the counter follows the commit of the last move)
		}
		for _, o := range st.OSDs {
			if slices.Contains(added, o.ID) && o.Components < 4 {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("new OSDs not filled: %+v, repair %+v", st.OSDs, st.Repair) })
	// A move in flight leaves its component to be decoded until it lands:
	// wait for the balancer to be done before taking a new OSD away.
	testcluster.Eventually(t, 60*time.Second, func() bool {
		st, _ = cl.Status(ctx)
		return !st.Repair.Balancing && st.Repair.Active == 0
	}, func() string { return fmt.Sprintf("rebalancing never settled: %+v %+v", st.Repair, st.OSDs) })
	checkAll(t, cl, files, "after rebalancing")
	checkConsistent(t, cl, "after rebalancing")
	c.StopOSD(osdIndex(c, added[0])) // the moved components are needed
	checkAll(t, cl, files, "after rebalancing, with a new OSD down")
}

// The checker itself: a stripe whose parity was changed behind braid's
// back (checksums updated too, so only parity can tell) is reported.
func TestCheckFindsInconsistentStripe(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(7, 7)), 1<<20)
	put(t, cl, "/x", "ec:4+2,unit=64KiB", data)
	if rep := checkConsistent(t, cl, "fresh file"); rep.Stripes != 4 || rep.Files != 1 {
		t.Fatalf("checked %d files, %d stripes; want 1, 4", rep.Files, rep.Stripes)
	}
	// Overwrite one unit in place through a raw OSD write: block checksums
	// stay valid, parity no longer matches.
	fi, err := cl.Stat(ctx, "/x")
	if err != nil {
		t.Fatal(err)
	}
	if err := testcluster.RawWrite(c, fi.Ino, 0, fi.Layout.Components[0].OSD, fi.Layout.Version, 0, []byte("tampered")); err != nil {
		t.Fatal(err)
	}
	rep, err := cl.Check(ctx, "/")
	if err != nil || len(rep.Problems) != 1 {
		t.Fatalf("check after tampering: %v, problems %q", err, rep.Problems)
	}
	// Scrub treats a checksum-clean but inconsistent stripe as torn by a
	// dead writer: it recomputes parity from the data units.
	if _, err := cl.Scrub(ctx, "/x"); err != nil {
		t.Fatal(err)
	}
	var st braid.Status
	testcluster.Eventually(t, 30*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && st.Repair.ScrubbedFiles >= 1 && st.Repair.Active == 0
	}, func() string { return fmt.Sprintf("scrub not done: %+v", st.Repair) })
	checkConsistent(t, cl, "after scrubbing the torn stripe")
	copy(data, "tampered")
	mustRead(t, cl, "/x", "after scrub", data)
}

// With the MDS's store gone, recover-metadata rebuilds the namespace from
// the labels the OSDs keep with each object: every file back at its path
// (renames included), with its layout, size and bytes.
func TestRecoverMetadataFromOSDs(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(8, 8))
	if err := cl.Mkdir(ctx, "/proj/a/b", true); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i, p := range []string{"/top", "/proj/x", "/proj/a/y", "/proj/a/b/z", "/proj/a/b/small", "/old/moved"} {
		if err := cl.Mkdir(ctx, filepath.Dir(p), true); err != nil {
			t.Fatal(err)
		}
		want[p] = randBytes(rng, []int{3 << 20, 1 << 20, 700 << 10, 2<<20 + 1, 3000, 500 << 10}[i])
		put(t, cl, p, []string{"ec:4+2,unit=64KiB", "mirror:3", "ec:2+1,unit=32KiB", ""}[i%4], want[p])
	}
	// Renames after the files were written: labels must follow.
	if err := cl.Rename(ctx, "/old", "/new"); err != nil {
		t.Fatal(err)
	}
	want["/new/moved"] = want["/old/moved"]
	delete(want, "/old/moved")
	if err := cl.Rename(ctx, "/proj/x", "/proj/a/x2"); err != nil {
		t.Fatal(err)
	}
	want["/proj/a/x2"] = want["/proj/x"]
	delete(want, "/proj/x")
	waitLabelled(t, cl)
	c.WipeMDS()
	testcluster.Eventually(t, 20*time.Second, func() bool {
		st, err := cl.Status(ctx)
		return err == nil && st.UpOSDs() == 6 && len(st.OSDs) == 6
	}, func() string { return "OSDs did not re-register with the empty MDS" })
	if _, err := cl.Stat(ctx, "/top"); err == nil {
		t.Fatal("the wiped MDS still knows /top")
	}
	res, err := cl.RecoverMetadata(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != int64(len(want)) || res.Unnamed != 0 || len(res.Problems) != 0 {
		t.Fatalf("recovered %+v, want %d files at their paths", res, len(want))
	}
	for p, data := range want {
		mustRead(t, cl, p, "after recover-metadata", data)
	}
	if _, err := cl.Stat(ctx, "/old/moved"); err == nil {
		t.Fatal("a file came back at its name from before a rename")
	}
	// The recovered cluster works as before: new files, no clash of inos.
	fresh := randBytes(rng, 100<<10)
	put(t, cl, "/proj/new", "", fresh)
	mustRead(t, cl, "/proj/new", "new file after recovery", fresh)
	for p, data := range want {
		mustRead(t, cl, p, "after a new file", data)
	}
	if _, err := cl.RecoverMetadata(ctx, false); err == nil {
		t.Fatal("recover-metadata into a live namespace succeeded without force")
	}
}

// Rebalancing weighs components by the data they hold: thousands of small
// files on a balanced cluster once looked like gigabytes (each counted as
// a whole stripe unit) and healthy files were moved, shown as repairs.
func TestSmallFilesDoNotTriggerRebalancing(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, BalanceSlackBytes: 8 << 20})
	cl := c.Dial()
	const files, size = 300, 4096
	for i := 0; i < files; i++ {
		put(t, cl, fmt.Sprintf("/s%d", i), "", make([]byte, size)) // mirror:3 by size
	}
	var st braid.Status
	testcluster.Eventually(t, 20*time.Second, func() bool {
		var err error
		if st, err = cl.Status(ctx); err != nil {
			return false
		}
		var est int64
		for _, o := range st.OSDs {
			est += o.LayoutBytes
		}
		return est == files*size*3
	}, func() string {
		var est int64
		for _, o := range st.OSDs {
			est += o.LayoutBytes
		}
		return fmt.Sprintf("OSDs' layout bytes add up to %d, want %d", est, files*size*3)
	})
	if st.Repair.Balancing || st.Repair.Rebalanced != 0 || st.Repair.FilesDone != 0 {
		t.Fatalf("a balanced cluster of small files rebalanced: %+v", st.Repair)
	}
}

// The objects a move leaves behind are its copy sources: their deletion
// waits for the repair to finish, however long it takes (deleted under a
// slow drain, a source once read as zeros and was copied as data:
// "parity disagrees with data" after TestDrainMovesEverythingOff under
// load).
func TestMoveSourcesOutliveTheDeleteDelay(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 7, RepairWorkers: -1})
	cl := c.Dial()
	put(t, cl, "/f", "ec:2+2,unit=32KiB", randBytes(rand.New(rand.NewPCG(7, 8)), 1<<20))
	put(t, cl, "/other", "ec:2+2,unit=32KiB", make([]byte, 100<<10))
	fi, err := cl.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	from := fi.Layout.Components[0].OSD
	if err := cl.DrainOSD(ctx, from, false); err != nil {
		t.Fatal(err)
	}
	conn, err := wire.Dial(ctx, c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var task mdsproto.RepairTask
	testcluster.Eventually(t, 10*time.Second, func() bool {
		body, _ := mdsproto.Marshal(mdsproto.RepairAssignReq{Worker: "slow"})
		meta, _, err := conn.Call(ctx, mdsproto.OpRepairAssign, body, nil, nil)
		return err == nil && mdsproto.Unmarshal(meta, &task) == nil && task.Inode.Ino == fi.Ino && task.MoveFrom[0] == from
	}, func() string { return fmt.Sprintf("no move of /f's component 0 claimed: %+v", task) })
	old := objectPath(c, osdIndex(c, from), fi.Ino, 0, "dat")
	// Removing /other queues its deletion after the move's; once its
	// objects are gone, GC passes have run past the move's delay too.
	before := c.ObjectFiles()
	if err := cl.Remove(ctx, "/other"); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 20*time.Second, func() bool { return c.ObjectFiles() <= before-4 },
		func() string { return "the removed file's objects were never deleted" })
	if _, err := os.Stat(old); err != nil {
		t.Fatalf("the source of a move still in progress was deleted: %v", err)
	}
}
