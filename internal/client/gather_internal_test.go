package client

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Gathered extents hold exactly the bytes written, newest on top, stay
// sorted, disjoint and not touching, and account the memory they hold,
// whatever order writes come in (random ones, runs in order, overlaps).
func TestGatheredExtentsMatchAModel(t *testing.T) {
	const S = 64 << 10
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var g gathered
		model := make([]byte, S)
		written := make([]bool, S)
		next := int64(0)
		for op := 0; op < 60; op++ {
			var off int64
			switch rng.IntN(3) {
			case 0:
				off = rng.Int64N(S)
			case 1:
				off = next // in order, as a run of small writes
			default:
				off = rng.Int64N(S/512) * 512
			}
			n := min(S-off, 1+rng.Int64N(8<<10))
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.IntN(255) + 1)
			}
			g.add(off, p, S)
			copy(model[off:], p)
			for i := off; i < off+n; i++ {
				written[i] = true
			}
			next = (off + n) % S
		}
		got := make([]byte, S)
		have := make([]bool, S)
		var mem int64
		for k, e := range g.ext {
			if k > 0 && g.ext[k-1].end() >= e.off {
				t.Fatalf("seed %d: extents %d and %d overlap or touch", seed, k-1, k)
			}
			if int64(cap(e.data)) > S-e.off && cap(e.data) > len(e.data) {
				t.Fatalf("seed %d: extent at %d holds %d bytes, past the stripe", seed, e.off, cap(e.data))
			}
			copy(got[e.off:], e.data)
			for i := e.off; i < e.end(); i++ {
				have[i] = true
			}
			mem += int64(cap(e.data))
		}
		if mem != g.mem {
			t.Fatalf("seed %d: extents hold %d bytes, accounted %d", seed, mem, g.mem)
		}
		for i := range written {
			if have[i] != written[i] {
				t.Fatalf("seed %d: byte %d held %v, written %v", seed, i, have[i], written[i])
			}
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("seed %d: gathered bytes differ from the model", seed)
		}
		if g.covers(S) != !bytes.Contains(boolBytes(written), []byte{0}) {
			t.Fatalf("seed %d: covers(%d) = %v", seed, S, g.covers(S))
		}
	}
}

func boolBytes(b []bool) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		if v {
			out[i] = 1
		}
	}
	return out
}
