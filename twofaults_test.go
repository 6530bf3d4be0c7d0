package braid_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/simdisk"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/testcluster"
)

// A file open for writing meets two short outages, of two OSDs holding
// components of one group, one after the other: each fails the unit
// writes of one stripe, in different stripes. Every stripe still has all
// but one of its units current, which ec:2+1 tolerates, so every
// acknowledged byte and every write since must read back after the sync
// and repairing (the simulation's seed 332 kind: the whole components were
// marked dirty, two of three, and the file became unreadable for good).
//
// Without repair workers the writer itself catches both components up: it kept
// the unit writes that failed and sends them again at its sync, and the
// commit clears the marks, so nothing needs rebuilding.
func TestTwoOutagesInDifferentStripesLoseNothing(t *testing.T) {
	for _, workers := range []int{0, -1} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { twoOutages(t, workers) })
		})
	}
}

func twoOutages(t *testing.T, workers int) {
	{
		nw := simnet.New()
		c := testcluster.Start(t, testcluster.Options{OSDs: 3, Network: nw, OSDFS: simdisk.New(0), RepairWorkers: workers})
		cl := c.Dial()
		rng := rand.New(rand.NewPCG(332, 2))
		f, err := cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:2+1,unit=32KiB", SizeHint: -1})
		if err != nil {
			t.Fatal(err)
		}
		want := randBytes(rng, 8<<16) // eight stripes
		if _, err := f.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		fi, err := cl.Stat(ctx, "/f")
		if err != nil {
			t.Fatal(err)
		}
		for i, stripe := range []int{1, 5} {
			victim := osdIndex(c, fi.Layout.Components[i].OSD)
			addr := c.OSDs[victim].Addr()
			nw.Isolate(addr)
			patch := randBytes(rng, 1<<16) // the whole stripe
			if _, err := f.WriteAt(patch, int64(stripe)<<16); err != nil {
				t.Fatalf("write with OSD %d cut off: %v", victim, err)
			}
			copy(want[stripe<<16:], patch)
			if _, err := f.ReadAt(make([]byte, 1), int64(stripe)<<16); err != nil { // the write is sent by now
				t.Fatalf("read back with OSD %d cut off: %v", victim, err)
			}
			nw.Heal(addr)
			<-time.After(3 * time.Second) // long enough for the MDS to see it down and up again
		}
		if err := f.Sync(); err != nil {
			t.Fatalf("sync after two outages: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		if d := dirtyOf(t, cl, "/f"); workers < 0 && len(d) > 0 {
			t.Fatalf("dirty components %v after the writer sent its failed writes again", d)
		}
		var st braid.Status
		testcluster.Eventually(t, time.Minute, func() bool {
			st, err = cl.Status(ctx)
			return err == nil && st.Health == "ok" && st.Repair.FilesLeft == 0 && st.Repair.Active == 0
		}, func() string { return fmt.Sprintf("not healed: %s %q %+v", st.Health, st.Problems, st.Repair) })
		mustRead(t, cl, "/f", "after two outages and repairing", want)
		checkConsistent(t, cl, "after repairing")
		if workers < 0 && st.Repair.FilesDone > 0 {
			t.Fatalf("%d files repaired without repair workers", st.Repair.FilesDone)
		}
	}
}
