package braid_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/braidfs/braid/internal/testcluster"
)

// Small writes at random places over a whole committed file (what fio
// does: it lays the file out, then writes 4 KiB blocks at random) are
// gathered, and each stripe rewrites only the columns they changed. The
// file reads back as a model of it says, and every stripe's parity agrees
// with its data.
//
// A file grown by truncation (as fio's fallocate does) is a hole: its
// objects hold nothing, and the pieces written there must still leave
// every object of a stripe's group ending at the same place.
func TestRandomSmallWritesKeepParity(t *testing.T) {
	for _, hole := range []bool{false, true} {
		t.Run(fmt.Sprintf("hole=%v", hole), func(t *testing.T) { randomSmallWrites(t, hole) })
	}
}

func randomSmallWrites(t *testing.T, hole bool) {
	const spec, size = "ec:4+2", 16 << 20
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	createEmpty(t, cl, "/r", spec)
	model := make([]byte, size)
	f, err := cl.OpenFile(ctx, "/r", true)
	if err != nil {
		t.Fatal(err)
	}
	if hole {
		err = f.Truncate(size)
	} else {
		for i := range model {
			model[i] = byte(rng.IntN(256))
		}
		_, err = f.WriteAt(model, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		f, err := cl.OpenFile(ctx, "/r", true)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 300; i++ {
			n := []int{4096, 512, 10_000, 1}[rng.IntN(4)]
			off := rng.IntN(size - n)
			if rng.IntN(2) == 0 {
				off = off / 4096 * 4096
			}
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.IntN(256))
			}
			if _, err := f.WriteAt(p, int64(off)); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		checkConsistent(t, cl, fmt.Sprintf("round %d", round))
		mustRead(t, cl, "/r", fmt.Sprintf("round %d", round), model)
	}
}
