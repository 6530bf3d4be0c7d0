package client

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// holesIn keeps every byte of the pieces it is given, in order and in
// place; the zero segments it makes are whole zero blocks inside what the
// object is vouched to hold, a whole piece or at least minHoleBytes; and
// it never makes more segments than a stage may carry.
func TestHolesInKeepsEveryByte(t *testing.T) {
	punched := 0
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		var units []stagedUnit
		at := rng.Int64N(3 * colAlign)
		for range 1 + rng.IntN(6) {
			n := 1 + rng.IntN(20*colAlign)
			p := make([]byte, n)
			for i := 0; i < n; {
				run := 1 + rng.IntN(8*colAlign)
				if rng.IntN(2) == 0 {
					for j := i; j < min(n, i+run); j++ {
						p[j] = byte(1 + rng.IntN(255))
					}
				}
				i += run
			}
			units = append(units, stagedUnit{off: at, data: p})
			at += int64(n) + rng.Int64N(2*colAlign)
		}
		held := rng.Int64N(at + colAlign)
		want := flatten(units)
		out := holesIn(units, held)
		if got := flatten(out); !bytes.Equal(got, want) {
			t.Fatalf("seed %d: the pieces' bytes changed", seed)
		}
		for i, u := range out {
			if i > 0 && out[i-1].end() > u.off {
				t.Fatalf("seed %d: pieces %d and %d overlap", seed, i-1, i)
			}
			if u.zero == 0 {
				continue
			}
			if u.off%colAlign != 0 || u.zero%colAlign != 0 || u.end() > held {
				t.Fatalf("seed %d: zeros at %d+%d: not whole blocks inside %d", seed, u.off, u.zero, held)
			}
			if u.zero < minHoleBytes && !isPiece(units, u) {
				t.Fatalf("seed %d: zeros at %d+%d: shorter than %d and not a whole piece", seed, u.off, u.zero, minHoleBytes)
			}
			punched++
		}
		if len(out) > 4096 {
			t.Fatalf("seed %d: %d segments", seed, len(out))
		}
	}
	if punched == 0 {
		t.Fatal("no zero segments at all: the test draws no zero blocks")
	}
}

func isPiece(units []stagedUnit, z stagedUnit) bool {
	for _, u := range units {
		if u.off == z.off && int64(len(u.data)) == z.zero {
			return true
		}
	}
	return false
}

// flatten lays pieces out as the object would hold them.
func flatten(units []stagedUnit) []byte {
	var end int64
	for _, u := range units {
		end = max(end, u.end())
	}
	img := make([]byte, end)
	for i := range img {
		img[i] = 0xee // untouched
	}
	for _, u := range units {
		if u.zero > 0 {
			clear(img[u.off:u.end()])
		} else {
			copy(img[u.off:], u.data)
		}
	}
	return img
}
