package placement

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/braidfs/braid/internal/layout"
)

func TestPlaceImpossible(t *testing.T) {
	spec, _ := layout.Parse("ec:8+2")
	if _, err := Place(spec, -1, cands(6), rand.New(rand.NewPCG(1, 1))); !errors.Is(err, ErrTooFewOSDs) {
		t.Fatalf("ec:8+2 on 6 OSDs: %v", err)
	}
}

func TestPlaceSmallFileOneGroup(t *testing.T) {
	spec, _ := layout.Parse("ec:2+1,unit=64KiB")
	l, err := Place(spec, 100<<10, cands(12), rand.New(rand.NewPCG(1, 1)))
	if err != nil || l.Groups != 1 {
		t.Fatalf("small file got %d groups, %v", l.Groups, err)
	}
}

func TestPlacePrefersFreeSpace(t *testing.T) {
	up := cands(8)
	up[0].FreeBytes = 1 << 20 // nearly full
	rng := rand.New(rand.NewPCG(3, 4))
	spec, _ := layout.Parse("stripe:4")
	hits := 0
	for i := 0; i < 500; i++ {
		l, _ := Place(spec, 0, up, rng)
		for _, id := range l.OSDs {
			if id == 1 {
				hits++
			}
		}
	}
	if hits > 25 { // uniform choice would pick it ~250 times
		t.Fatalf("nearly full OSD chosen %d/500 times", hits)
	}
}

func TestSmallFileSpec(t *testing.T) {
	ec, _ := layout.Parse("ec:4+2")
	if s := SmallFileSpec(ec, 1000); s.Scheme != layout.Mirror || s.M != 2 {
		t.Fatalf("small ec:4+2 file → %s, want mirror:3", s)
	}
	if s := SmallFileSpec(ec, 1<<20); s != ec {
		t.Fatalf("large file respecified: %s", s)
	}
	st, _ := layout.Parse("stripe:6")
	if s := SmallFileSpec(st, 10); s.Scheme != layout.Mirror || s.M != 0 {
		t.Fatalf("small stripe file → %s, want mirror:1", s)
	}
}

func cands(n int) []Candidate {
	out := make([]Candidate, n)
	for i := range out {
		out[i] = Candidate{ID: uint32(i + 1), FreeBytes: 1 << 30}
	}
	return out
}
