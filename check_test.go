package braid_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// Check walked holes: its time followed a file's apparent size, not its
// data (an fsstress tree of 256 GiB apparent in 9 GiB stored took 1,389
// s for 839 files). It reads the stripes that hold data now, and still
// finds a flipped byte there and objects lost where nothing else holds
// data.
func TestCheckReadsDataNotHoles(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, RepairWorkers: -1})
	cl := c.Dial()
	const far = 4 << 30 // 4 GiB apparent
	f, err := cl.Create(ctx, "/sparse", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	head, tail := randBytes(rand.New(rand.NewPCG(7, 1)), 300<<10), randBytes(rand.New(rand.NewPCG(7, 2)), 200<<10)
	if _, err := f.WriteAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(tail, far); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rep := checkConsistent(t, cl, "a sparse file")
	stored := int64(len(head) + len(tail))
	if rep.Holes == 0 || rep.BytesRead > 4*stored || rep.BytesRead < stored {
		t.Fatalf("check of %d bytes in 4 GiB apparent: %d bytes read, %d stripes, %d holes skipped; want about the data (with parity) read and the holes skipped",
			stored, rep.BytesRead, rep.Stripes, rep.Holes)
	}
	// A flipped byte in the far data is still found.
	fi, err := cl.Stat(ctx, "/sparse")
	if err != nil {
		t.Fatal(err)
	}
	_, comp, id := unitHolding(t, cl, "/sparse", far)
	p := objectPath(c, osdIndex(c, id), fi.Ino, comp, "dat")
	obj, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := obj.Stat()
	if err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if _, err := obj.ReadAt(one, st.Size()-1000); err != nil {
		t.Fatal(err)
	}
	one[0] ^= 0x5a
	if _, err := obj.WriteAt(one, st.Size()-1000); err != nil {
		t.Fatal(err)
	}
	obj.Close()
	rep, err = cl.Check(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) == 0 {
		t.Fatalf("a flipped byte past 4 GiB of holes was not found: %+v", rep)
	}
	// Objects gone from every OSD (deleted under the running OSDs, which
	// notice within a second) map no data at all: each is still found
	// lost, against what the MDS recorded as written.
	for _, comp := range fi.Layout.Components {
		for _, ext := range []string{"dat", "sum"} {
			_ = os.Remove(objectPath(c, osdIndex(c, comp.OSD), fi.Ino, comp.Index, ext))
		}
	}
	var last braid.CheckReport
	testcluster.Eventually(t, 30*time.Second, func() bool {
		last, err = cl.Check(ctx, "/")
		lost := 0
		for _, pr := range last.Problems {
			if strings.Contains(pr, "missing") || strings.Contains(pr, "object ends") {
				lost++
			}
		}
		return err == nil && lost >= len(fi.Layout.Components)
	}, func() string { return fmt.Sprintf("every object of /sparse gone, check says: %v %+v", err, last) })
}

// Scrub walked holes as check did, at its rate limit: on an fsstress tree
// it had done 134 of 839 files after 900 s. It reads what holds data.
func TestScrubReadsDataNotHoles(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	f, err := cl.Create(ctx, "/sparse", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(rand.New(rand.NewPCG(7, 3)), 256<<10)
	for _, at := range []int64{0, 2 << 30, 4 << 30} {
		if _, err := f.WriteAt(data, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Scrub(ctx, "/sparse"); err != nil {
		t.Fatal(err)
	}
	waitScrubbed(t, cl, before.Repair.ScrubTaken+1)
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read := st.Repair.ScrubBytes - before.Repair.ScrubBytes
	if st.Repair.ScrubbedFiles-before.Repair.ScrubbedFiles != 1 || read < 3*int64(len(data)) || read > 12*int64(len(data)) {
		t.Fatalf("scrub of %d bytes in 4 GiB apparent: %d files scrubbed, %d bytes read; want the data and parity read, not the holes",
			3*len(data), st.Repair.ScrubbedFiles-before.Repair.ScrubbedFiles, read)
	}
	checkConsistent(t, cl, "after scrub")
}
