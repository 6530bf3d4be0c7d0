package seal

import (
	"bytes"
	"errors"
	"testing"
)

func TestSizesRoundTrip(t *testing.T) {
	// A unit below the minimum (never valid in a layout) still maps
	// without dividing by zero.
	if got := PlainSize(StoredSize(3*BlockBytes+5, 4096), 4096); got != 3*BlockBytes+5 {
		t.Errorf("a 4 KiB unit: PlainSize(StoredSize) = %d", got)
	}
	for _, unit := range []int64{MinUnitBytes, 64 << 10, 1 << 20} {
		for _, n := range []int64{0, 1, 100, BlockBytes - 1, BlockBytes, BlockBytes + 1, 3*BlockBytes + 7,
			BlocksPerUnit(unit) * BlockBytes, BlocksPerUnit(unit)*BlockBytes + 1, 1 << 30} {
			s := StoredSize(n, unit)
			if got := PlainSize(s, unit); got != n {
				t.Errorf("unit %d: PlainSize(StoredSize(%d) = %d) = %d", unit, n, s, got)
			}
		}
		// Every block lies inside one unit.
		for i := int64(0); i < 3*BlocksPerUnit(unit)+2; i++ {
			off := StoredOffset(i, unit)
			if off/unit != (off+StoredBlockBytes-1)/unit {
				t.Fatalf("unit %d: block %d at %d straddles two units", unit, i, off)
			}
		}
	}
	if StoredSize(BlockBytes, 1<<20) != StoredBlockBytes || StoredSize(1, 1<<20) != 1+Overhead {
		t.Errorf("stored sizes: a block %d, a byte %d", StoredSize(BlockBytes, 1<<20), StoredSize(1, 1<<20))
	}
	// A stored tail too short to hold plaintext holds none.
	if PlainSize(StoredBlockBytes+Overhead, 1<<20) != BlockBytes {
		t.Errorf("PlainSize of a block and a bare overhead: %d", PlainSize(StoredBlockBytes+Overhead, 1<<20))
	}
	// The second unit's first block starts at the unit, past the first's unused tail.
	if got := StoredOffset(BlocksPerUnit(MinUnitBytes), MinUnitBytes); got != MinUnitBytes {
		t.Errorf("first block of the second unit at %d, want %d", got, MinUnitBytes)
	}
}

func TestSealOpen(t *testing.T) {
	s, err := New(NewKey())
	if err != nil {
		t.Fatal(err)
	}
	plain := bytes.Repeat([]byte("secret data "), 400)[:BlockBytes]
	stored := s.Seal(nil, plain, 7)
	if len(stored) != StoredBlockBytes || bytes.Contains(stored, []byte("secret data")) {
		t.Fatalf("stored block: %d bytes, plaintext visible %v", len(stored), bytes.Contains(stored, []byte("secret data")))
	}
	got, err := s.Open(nil, stored, 7)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open: %v", err)
	}
	if again := s.Seal(nil, plain, 7); bytes.Equal(again, stored) {
		t.Fatal("sealing a block twice gave the same bytes: a nonce repeated")
	}

	refused := func(what string, b []byte, idx int64) {
		t.Helper()
		if _, err := s.Open(nil, b, idx); !errors.Is(err, ErrAuth) {
			t.Errorf("%s: %v, want ErrAuth", what, err)
		}
	}
	for _, at := range []int{0, NonceBytes, StoredBlockBytes / 2, StoredBlockBytes - 1} {
		flipped := bytes.Clone(stored)
		flipped[at] ^= 1
		refused("a flipped bit", flipped, 7)
	}
	refused("a block moved to another index", stored, 8)
	refused("a torn block", stored[:StoredBlockBytes-100], 7)
	other, _ := New(NewKey())
	if _, err := other.Open(nil, stored, 7); !errors.Is(err, ErrAuth) {
		t.Errorf("another file's key opened the block: %v", err)
	}
	short := s.Seal(nil, []byte("tail"), 3)
	if got, err := s.Open([]byte("pre"), short, 3); err != nil || string(got) != "pretail" {
		t.Errorf("a short last block: %q %v", got, err)
	}
	if got, err := s.Open(nil, make([]byte, StoredBlockBytes), 2); err != nil || !bytes.Equal(got, make([]byte, BlockBytes)) {
		t.Errorf("a hole: %d bytes, %v", len(got), err)
	}
	refused("a block of overhead only", make([]byte, Overhead), 1)
}

// BenchmarkSeal and BenchmarkOpen: the cipher's own cost per byte, on
// one core.
func BenchmarkSeal(b *testing.B) {
	s, _ := New(NewKey())
	plain := make([]byte, BlockBytes)
	out := make([]byte, 0, StoredBlockBytes)
	b.SetBytes(BlockBytes)
	for i := 0; b.Loop(); i++ {
		out = s.Seal(out[:0], plain, int64(i))
	}
}

func BenchmarkOpen(b *testing.B) {
	s, _ := New(NewKey())
	plain := bytes.Repeat([]byte{1}, BlockBytes)
	stored := s.Seal(nil, plain, 3)
	out := make([]byte, 0, BlockBytes)
	b.SetBytes(BlockBytes)
	for b.Loop() {
		if _, err := s.Open(out[:0], stored, 3); err != nil {
			b.Fatal(err)
		}
	}
}
