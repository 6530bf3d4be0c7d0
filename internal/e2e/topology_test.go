package e2e

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
)

// TestTopologyAndCorruptionUnderLoad adds an OSD and drains another while
// files are being overwritten, then flips bytes in an OSD's data files on
// disk: reads stay correct, scrub repairs, and every acknowledged byte and
// every stripe checks out.
func TestTopologyAndCorruptionUnderLoad(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 5))
	c := StartCluster(t, 6, "--balance-slack", "1MiB", "--scrub-every", "0")
	cl := c.Client()
	model, sizes := fileModel{}, map[string]int{}
	var paths []string
	for i := 0; i < 8; i++ {
		p := fmt.Sprintf("/t%d", i)
		paths = append(paths, p)
		data := bytesOf(rng.Uint64(), 512<<10+rng.IntN(2<<20))
		createFile(t, cl, p, faultSpecs[i%2], data)
		model[p], sizes[p] = data, len(data)
	}
	wl := startWorkload(cl, paths, sizes, model, seed)

	// A new OSD takes components from the others while writes go on.
	c.AddOSD()
	st := waitStatus(t, cl, 60*time.Second, "rebalancing onto the new OSD", func(st braid.Status) bool {
		o := st.OSDs[len(st.OSDs)-1]
		return o.Components >= 4 && st.Repair.Rebalanced > 0
	})
	added := st.OSDs[len(st.OSDs)-1].ID

	// An OSD is drained while writes go on, then stopped and forgotten.
	drained := st.OSDs[0].ID
	if err := cl.DrainOSD(ctx, drained, false); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, cl, 60*time.Second, "drain", func(st braid.Status) bool {
		for _, o := range st.OSDs {
			if o.ID == drained {
				return o.Components == 0 && st.Repair.Active == 0
			}
		}
		return false
	})
	writes := wl.stop(t, c)
	for _, p := range c.OSDs {
		if pidOf(t, cl, drained) == p.cmd.Process.Pid {
			p.Kill()
		}
	}
	waitStatus(t, cl, 30*time.Second, "drained OSD seen down", func(st braid.Status) bool {
		return slices.ContainsFunc(st.OSDs, func(o mdsproto.OSDStatus) bool { return o.ID == drained && o.State != mdsproto.StateUp })
	})
	if err := cl.RemoveOSD(ctx, drained); err != nil {
		t.Fatalf("remove drained OSD: %v", err)
	}
	waitHealed(t, cl, 60*time.Second)
	verifyModel(t, cl, model, "after add and drain")

	// Corruption: flip a byte in every data file of the added OSD.
	flipped := 0
	for _, p := range c.OSDs {
		if pidOf(t, cl, added) != p.cmd.Process.Pid {
			continue
		}
		dir := strings.TrimSuffix(p.log, ".log")
		_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
			if err == nil && strings.HasSuffix(path, ".dat") && info.Size() > 8192 {
				b, _ := os.ReadFile(path)
				b[rng.IntN(len(b))] ^= 0x40
				flipped++
				return os.WriteFile(path, b, 0o644)
			}
			return nil
		})
	}
	if flipped == 0 {
		t.Fatal("test setup: nothing to corrupt on the added OSD")
	}
	// Reads over corrupt blocks still return the right bytes, and queue
	// their files for a scrub: count those repairs too.
	before, _ := cl.Status(ctx)
	for p, want := range model {
		mustMatch(t, cl, p, want)
	}
	if _, err := cl.Scrub(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(t, cl, 60*time.Second, "scrub", func(st braid.Status) bool {
		return st.Repair.ScrubQueued == 0 && st.Repair.Active == 0 && st.Repair.ScrubbedFiles >= before.Repair.ScrubbedFiles+int64(len(paths))
	})
	// Not every flip needs a repair: an object a move left behind awaits
	// deletion, and bytes past a file's end in its last stripe are never
	// read. So: something was rewritten, and every stripe now checks out
	// (check reads every unit and verifies its checksums and parity).
	if repaired := st.Repair.ScrubRepaired - before.Repair.ScrubRepaired; repaired == 0 {
		t.Fatalf("scrub rewrote no unit; %d data files were corrupted", flipped)
	}
	if rep, err := cl.Check(ctx, "/"); err != nil || len(rep.Problems) > 0 || rep.Unverified > 0 {
		t.Fatalf("check after scrub of %d corrupted data files: %+v %v", flipped, rep, err)
	}
	checked := verifyModel(t, cl, model, "after scrub")
	t.Logf("TOPOLOGY seed=%d writes=%d added=%d drained=%d flipped_files=%d bytes_verified=%d bytes_lost=0",
		seed, writes, added, drained, flipped, checked)
}

func waitStatus(t *testing.T, cl *braid.Client, timeout time.Duration, what string, cond func(braid.Status) bool) braid.Status {
	t.Helper()
	var st braid.Status
	testcluster.Eventually(t, timeout, func() bool {
		var err error
		st, err = cl.Status(ctx)
		return err == nil && cond(st)
	}, func() string { return fmt.Sprintf("%s: %+v %q %+v", what, st.OSDs, st.Problems, st.Repair) })
	return st
}

func pidOf(t *testing.T, cl *braid.Client, id uint32) int {
	t.Helper()
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range st.OSDs {
		if o.ID == id {
			return o.Pid
		}
	}
	return -1
}

func mustMatch(t *testing.T, cl *braid.Client, p string, want []byte) {
	t.Helper()
	f, err := cl.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || string(got) != string(want) {
		t.Fatalf("%s: read over corrupt blocks: err %v, first difference at %d", p, err, firstDiff(got, want))
	}
}
