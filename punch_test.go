package braid_test

import (
	"fmt"
	"testing"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/testcluster"
)

// Punching a hole makes the range read as zeros and keeps the file's
// size. The stripes it covers wholly are punched on every OSD: their
// space is given back, and their parity (zeros over zeros) still agrees
// with their data, so the file decodes with any OSD down. The pieces of
// stripes at its ends are written with zeros. A punch reaching past the
// end stops at it, and writes into a punched range land as into a hole.
func TestPunchHoleFreesWholeStripes(t *testing.T) {
	for _, spec := range []string{"ec:4+2,unit=64k", "mirror:3,unit=64k", "stripe:3,unit=64k"} {
		t.Run(spec, func(t *testing.T) { punchHole(t, spec) })
	}
}

func punchHole(t *testing.T, spec string) {
	rng := seededRand(t, 2)
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	createEmpty(t, cl, "/p", spec)
	lay, err := layout.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := cl.OpenFile(ctx, "/p", true)
	if err != nil {
		t.Fatal(err)
	}
	S := lay.StripeBytes()
	size := 40*S + 12345
	model := make([]byte, size)
	for i := range model {
		model[i] = byte(rng.IntN(255) + 1)
	}
	if _, err := f.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	before := c.AllocatedBytes()

	f, err = cl.OpenFile(ctx, "/p", true)
	if err != nil {
		t.Fatal(err)
	}
	punch := func(off, n int64) {
		t.Helper()
		if err := f.PunchHole(off, n); err != nil {
			t.Fatalf("punch %d+%d: %v", off, n, err)
		}
		clear(model[min(off, size):min(off+n, size)])
	}
	punch(S/2+100, 30*S) // stripes 1-29 whole, a piece of 0 and of 30
	punch(31*S+5, 7)     // inside one stripe
	punch(38*S, 10*S)    // past the end: the last stripes
	if _, err := f.WriteAt([]byte("into the hole"), 3*S+77); err != nil {
		t.Fatal(err)
	}
	copy(model[3*S+77:], "into the hole")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := cl.Stat(ctx, "/p"); err != nil || st.Size != size {
		t.Fatalf("size %d, %v after punching; want %d", st.Size, err, size)
	}
	mustRead(t, cl, "/p", "punched", model)
	checkConsistent(t, cl, "punched")
	after := c.AllocatedBytes()
	t.Logf("%s: %d bytes allocated before, %d after", spec, before, after)
	// 29 + 2 whole stripes, every unit of them, less a stripe's for the
	// write into the hole.
	if want := 30 * S * int64(lay.Width()) / int64(lay.K); before-after < want {
		t.Errorf("punching freed %d bytes of %d, want at least %d", before-after, before, want)
	}
	// Inside one stripe, the whole blocks of a data unit the hole covers
	// are punched too (with the parity columns rewritten; a plain
	// stripe's units alone).
	before = c.AllocatedBytes()
	f, err = cl.OpenFile(ctx, "/p", true)
	if err != nil {
		t.Fatal(err)
	}
	punch(33*S+8192+100, 49152) // 11 whole blocks and two pieces, in one data unit
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	after = c.AllocatedBytes()
	t.Logf("%s: a hole inside a stripe: %d bytes allocated before, %d after", spec, before, after)
	// Less two blocks: splitting an extent may cost ext4 a block of its
	// extent tree (seen once: 7 blocks punched, 6 freed).
	if want := int64(9 * 4096); before-after < want {
		t.Errorf("a hole inside a stripe freed %d bytes, want at least %d", before-after, want)
	}
	mustRead(t, cl, "/p", "a hole inside a stripe", model)
	checkConsistent(t, cl, "a hole inside a stripe")
	if lay.Tolerates() > 0 {
		mustReadEachOSDDown(t, c, cl, "/p", fmt.Sprintf("%s punched", spec), model)
	}
}
