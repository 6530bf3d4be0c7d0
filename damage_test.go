package braid_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
)

// fileEvent finds the status's event about path, with what; nil if none.
func fileEvent(st braid.Status, path, what string) *mdsproto.FileEvent {
	for i, e := range st.FileEvents {
		if e.Path == path && e.What == what {
			return &st.FileEvents[i]
		}
	}
	return nil
}

// Three of an ec:4+2 file's six component objects gone from disk: get
// and check failed, but status said "health: ok, unrepairable: 0" (the
// MDS logged four failed repairs and forgot the file). Now status names
// the file as lost, with why and since when, and its health is not ok
// while the file is there; the file's removal clears it.
func TestLostFileIsNamedInStatus(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(35, 3)), 3<<20)
	put(t, cl, "/doomed", "ec:4+2,unit=1MiB", data)
	put(t, cl, "/fine", "ec:4+2,unit=1MiB", data)
	fi, err := cl.Stat(ctx, "/doomed")
	if err != nil {
		t.Fatal(err)
	}
	for comp := 0; comp < 3; comp++ {
		loseObject(t, c, fi.Ino, comp, fi.Layout.Components[comp].OSD)
	}
	r, err := cl.Open(ctx, "/doomed")
	if err == nil {
		_, err = r.ReadAt(make([]byte, len(data)), 0)
		r.Close()
	}
	if err == nil {
		t.Fatal("a file with three of six components lost read back")
	}
	if _, err := cl.Scrub(ctx, "/doomed"); err != nil {
		t.Fatal(err)
	}
	var st braid.Status
	testcluster.Eventually(t, 60*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && fileEvent(st, "/doomed", mdsproto.FileLost) != nil && len(st.LostFiles) > 0
	}, func() string {
		return fmt.Sprintf("status does not name /doomed as lost: health %s, lost %+v, events %+v, repair %+v, problems %q", st.Health, st.LostFiles, st.FileEvents, st.Repair, st.Problems)
	})
	if st.Health != mdsproto.HealthLost {
		t.Errorf("health %q with a file lost; want %q", st.Health, mdsproto.HealthLost)
	}
	lost := st.LostFiles[0]
	if lost.Path != "/doomed" || lost.Ino != fi.Ino || lost.Why == "" || lost.SinceNs == 0 || len(st.LostFiles) != 1 {
		t.Fatalf("lost files: %+v; want /doomed alone, with why and since when", st.LostFiles)
	}
	if !slices.ContainsFunc(st.Problems, func(p string) bool { return strings.Contains(p, "/doomed") }) {
		t.Errorf("problems do not name /doomed: %q", st.Problems)
	}
	mustRead(t, cl, "/fine", "a file beside the lost one", data)
	if err := cl.Remove(ctx, "/doomed"); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 30*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && len(st.LostFiles) == 0 && st.Health == mdsproto.HealthOK
	}, func() string {
		return fmt.Sprintf("after the lost file's removal: health %s, lost %+v", st.Health, st.LostFiles)
	})
}

// A flipped byte that scrub rewrote showed only as a counter: nothing
// named the file. Now status lists it among the recent file events, with
// what was found.
func TestScrubRepairIsNamedInStatus(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(35, 4)), 3<<20)
	put(t, cl, "/flipped", "ec:4+2,unit=1MiB", data)
	fi, err := cl.Stat(ctx, "/flipped")
	if err != nil {
		t.Fatal(err)
	}
	comp := fi.Layout.Components[1]
	p := objectPath(c, osdIndex(c, comp.OSD), fi.Ino, comp.Index, "dat")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x5a
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Scrub(ctx, "/flipped"); err != nil {
		t.Fatal(err)
	}
	var st braid.Status
	testcluster.Eventually(t, 60*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && fileEvent(st, "/flipped", mdsproto.FileRepaired) != nil
	}, func() string {
		return fmt.Sprintf("status does not name /flipped as repaired: events %+v", st.FileEvents)
	})
	ev := fileEvent(st, "/flipped", mdsproto.FileRepaired)
	if !strings.Contains(ev.Why, "corrupt") || ev.AtNs == 0 || ev.Ino != fi.Ino {
		t.Fatalf("repair event %+v: want the corruption found, and when", ev)
	}
	if st.Health != mdsproto.HealthOK || len(st.LostFiles) != 0 {
		t.Fatalf("after a repair: health %s, lost %+v", st.Health, st.LostFiles)
	}
	mustRead(t, cl, "/flipped", "after scrub", data)
}

// A put that failed with ENOSPC made status say its file "cannot be
// repaired until more OSDs return" with every OSD up, and nothing said
// what held the space or when it would free. The failed put's objects are
// not a file to repair: they await deletion, and status says how much
// they hold, that OSDs are full, and when the space frees.
func TestFailedPutOnFullOSDsIsExplained(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, CapacityBytes: 4 << 20, DeleteDelay: time.Hour})
	cl := c.Dial()
	f, err := cl.Create(ctx, "/big", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1, Atomic: true})
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.ReadFrom(io.LimitReader(zeroReader{}, 64<<20))
	if cerr := f.Close(); werr == nil && cerr == nil {
		t.Fatal("writing 64 MiB into 24 MiB of OSDs succeeded")
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Health != mdsproto.HealthOK || st.Repair.Unrepairable != 0 || st.LostCount != 0 {
		t.Errorf("right after a failed put: health %s, unrepairable %d, lost %+v, problems %q; want ok: nothing named is damaged",
			st.Health, st.Repair.Unrepairable, st.LostFiles, st.Problems)
	}
	testcluster.Eventually(t, 20*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && st.PendingDelete.Objects > 0
	}, func() string { return fmt.Sprintf("the failed put never awaited deletion: %+v", st.PendingDelete) })
	if st.Health != mdsproto.HealthOK || st.Repair.Unrepairable != 0 || st.LostCount != 0 {
		t.Errorf("after a failed put: health %s, unrepairable %d, lost %+v, problems %q; want ok: nothing named is damaged",
			st.Health, st.Repair.Unrepairable, st.LostFiles, st.Problems)
	}
	if !slices.ContainsFunc(st.Problems, func(p string) bool {
		return strings.Contains(p, "full") && strings.Contains(p, "awaiting deletion") && strings.Contains(p, "freed")
	}) {
		t.Errorf("status does not say the OSDs are full of objects awaiting deletion, and when they free: %q", st.Problems)
	}
}
