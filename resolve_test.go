package braid_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/testcluster"
)

// A staged write whose apply failed half done on one OSD (the disk took
// the data and failed the checksums with EIO) leaves a block there that
// fails its checksum, so the resolver can never apply that unit: it must
// give the unit up to a rebuild instead of retrying forever while the
// file's repair waits for the intent (simulation seed 190).
func TestStageThatCannotBeAppliedIsRebuilt(t *testing.T) {
	var failDir atomic.Value // OSD directory whose checksum writes fail
	failDir.Store("")
	disk := &osd.FaultFS{FS: osd.OSFS{}, Fault: func(op osd.FaultOp, path string) error {
		if d := failDir.Load().(string); d != "" && op == osd.FaultWrite && strings.HasPrefix(path, d+"/") && strings.HasSuffix(path, ".sum") {
			return &os.PathError{Op: "write", Path: path, Err: syscall.EIO}
		}
		return nil
	}}
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, OSDFS: disk})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(190, 1))
	// A whole stripe and 30,000 bytes: the units of the second stripe
	// end inside a block, so a write there merges with what it held.
	want := randBytes(rng, 4<<16+30000)
	put(t, cl, "/f", "ec:4+2,unit=64KiB", want)
	const at = 4<<16 + 29000
	fi, comp, id := unitHolding(t, cl, "/f", at)
	failDir.Store(c.OSDDir(osdIndex(c, id)))
	patch := randBytes(rng, 500)
	f, err := cl.OpenFile(ctx, "/f", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(patch, at); err != nil { // in the last, partial block
		t.Fatalf("partial write with one OSD failing checksum writes: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	failDir.Store("")
	copy(want[at:], patch)
	if d := dirtyOf(t, cl, "/f"); !slices.Contains(d, uint32(comp)) {
		t.Fatalf("dirty components %v after the apply on component %d failed (%+v)", d, comp, fi.Layout)
	}
	var st braid.Status
	testcluster.Eventually(t, 30*time.Second, func() bool {
		st, err = cl.Status(ctx)
		return err == nil && st.Intents == 0 && st.Health == "ok" && st.Repair.FilesLeft == 0 && st.Repair.Active == 0
	}, func() string {
		return fmt.Sprintf("the intent blocks the repair: %d intents, %s %q %+v", st.Intents, st.Health, st.Problems, st.Repair)
	})
	mustRead(t, cl, "/f", "after the rebuild", want)
	checkConsistent(t, cl, "after the rebuild")
}
