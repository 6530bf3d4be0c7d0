package braid_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/simdisk"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/testcluster"
)

// An OSD acknowledges a write before it is durable; the writer's Sync
// makes it so. An OSD that loses power in between comes back without the
// write and would answer the Sync as if nothing happened: before boots
// were compared, the sync succeeded and the file read back older bytes
// (the whole-cluster simulation found it). Now the writer notices the OSD
// restarted and sends what it had not synced again: every byte reads
// back, with no component marked dirty. Each OSD loses power in turn, at
// each of three points: after full-stripe writes, after a read-modify-
// write over them, with a partial stripe still buffered, and after a
// staged (two-phase) write over the unsynced ones.
func TestUnsyncedWritesSurviveAnOSDPowerCut(t *testing.T) {
	for osd := 0; osd < 3; osd++ {
		for point := 0; point < 4; point++ {
			t.Run(fmt.Sprintf("osd%d/point%d", osd, point), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { powerCutDuringWrites(t, osd, point) })
			})
		}
	}
}

func powerCutDuringWrites(t *testing.T, victim, point int) {
	disk := simdisk.New(0)
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, RepairWorkers: -1, Network: simnet.New(), OSDFS: disk})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(uint64(victim), uint64(point)))
	f, err := cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:2+1,unit=32KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	write := func(off int, n int) {
		t.Helper()
		data := randBytes(rng, n)
		if _, err := f.WriteAt(data, int64(off)); err != nil {
			t.Fatal(err)
		}
		want = append(want, make([]byte, max(0, off+n-len(want)))...)
		copy(want[off:], data)
	}
	cut := func() {
		c.StopOSD(victim)
		disk.CrashUnder(c.OSDDir(victim), nil) // keeps none of the unsynced writes
		c.StartOSD(victim)
	}
	if point == 3 {
		// A staged write is durable once applied, but the writes under it
		// that its OSD lost are sent again at the sync: before the staged
		// one was kept with them (the simulation's seed 19), they landed
		// over it and the file read older bytes.
		write(0, 200000)
		if err := f.Sync(); err != nil { // committed: partial stripes are staged from now on
			t.Fatal(err)
		}
		write(65536, 65536) // stripe 1 whole, in place
		write(70000, 5000)  // stripe 1 in part: staged and applied
		if _, err := f.ReadAt(make([]byte, 1), 0); err != nil {
			t.Fatal(err)
		}
		cut()
		syncAndCheck(t, c, f, victim, want)
		return
	}
	write(35013, 143301) // stripe 0 from its middle, stripes 1 and 2
	if point == 0 {
		// Let the write-behind land first: it is the OSD's to lose.
		if _, err := f.ReadAt(make([]byte, 1), 0); err != nil {
			t.Fatal(err)
		}
		cut()
	}
	write(14471, 121968) // read-modify-write of stripe 0, stripe 1 again, stripe 2 partly
	if point == 1 {
		if _, err := f.ReadAt(make([]byte, 1), 0); err != nil {
			t.Fatal(err)
		}
		cut()
	}
	if _, err := f.ReadAt(make([]byte, 1), 0); err != nil { // lets the write-behind land
		t.Fatal(err)
	}
	write(100000, 3000) // buffered: a partial stripe over written data
	if point == 2 {
		cut()
	}
	syncAndCheck(t, c, f, victim, want)
}

// syncAndCheck syncs f after OSD victim lost power, and checks it reads
// want with no component marked dirty and every stripe's parity agreeing.
func syncAndCheck(t *testing.T, c *testcluster.Cluster, f *braid.File, victim int, want []byte) {
	t.Helper()
	cl := c.Dial()
	if err := f.Sync(); err != nil {
		t.Fatalf("sync after OSD %d lost power: %v", victim, err)
	}
	got, err := get(t, cl, "/f")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after OSD %d lost power before the sync: %d bytes read (%v), want %d; first difference at %d",
			victim, len(got), err, len(want), firstDiff(got, want))
	}
	if d := dirtyOf(t, cl, "/f"); len(d) != 0 {
		t.Fatalf("components %v marked dirty: the writes were sent again", d)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if rep, err := cl.Check(ctx, "/f"); err != nil || len(rep.Problems) > 0 || rep.Unverified > 0 {
		t.Fatalf("check after OSD %d lost power: %+v %v", victim, rep, err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
