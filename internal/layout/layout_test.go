package layout

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
	}{
		{"stripe:6", Spec{Stripe, 6, 0, DefaultUnit, DefaultVisit, false}},
		{"mirror:3", Spec{Mirror, 1, 2, DefaultUnit, DefaultVisit, false}},
		{"ec:4+2", Spec{EC, 4, 2, DefaultUnit, DefaultVisit, false}},
		{"ec:4+2,unit=64KiB", Spec{EC, 4, 2, 64 << 10, DefaultVisit, false}},
		{" EC:8+3 , unit=4M , visit=2 ", Spec{EC, 8, 3, 4 << 20, 2, false}},
		{"ec:4+1,unit=1MiB,visit=16", Spec{EC, 4, 1, 1 << 20, 16, false}},
		{"mirror:1", Spec{Mirror, 1, 0, DefaultUnit, DefaultVisit, false}},
		{"ec:4+2,enc=aes-gcm", Spec{EC, 4, 2, DefaultUnit, DefaultVisit, true}},
		{"mirror:2,enc=AES-GCM,unit=64KiB", Spec{Mirror, 1, 1, 64 << 10, DefaultVisit, true}},
		{"stripe:2,enc=aes-gcm,enc=none", Spec{Stripe, 2, 0, DefaultUnit, DefaultVisit, false}},
	} {
		got, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		if got != tc.want {
			t.Fatalf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		again, err := Parse(got.String())
		if err != nil || again != got {
			t.Fatalf("round trip of %q via %q: %+v, %v", tc.in, got.String(), again, err)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{
		"", "raid5", "stripe", "stripe:0", "stripe:x", "mirror:0", "ec:4", "ec:4+0", "ec:0+2",
		"ec:40+40", "ec:4+2,unit=1000", "ec:4+2,unit=32MiB", "ec:4+2,visit=0",
		"ec:4+2,visit=5000", "ec:4+2,colour=red", "ec:4+2,unit", "ec:-1+2", "ec:4+2,unit=-4KiB", "ec:4+2,enc=rot13", "ec:4+2,enc", "mirror:2,unit=4KiB,enc=aes-gcm",
		"stripe:99999999999999999999",
	} {
		if _, err := Parse(in); !errors.Is(err, ErrBadSpec) {
			t.Errorf("Parse(%q) error = %v, want ErrBadSpec", in, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64KiB": 64 << 10, "1MiB": 1 << 20, "2m": 2 << 20, "1G": 1 << 30, "8k": 8 << 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestUnitOf pins the offset → visit → group → stripe → unit → OSD mapping.
// Layout: ec:2+1, unit 4KiB, visit 2, two groups; components 0-2 are group
// 0, 3-5 group 1. File stripes hold 8KiB of data.
func TestUnitOf(t *testing.T) {
	l := Layout{Spec: Spec{EC, 2, 1, 4096, 2, false}, Groups: 2, OSDs: []uint32{10, 11, 12, 13, 14, 15}}
	for _, tc := range []struct {
		fs        int64
		u         int
		group     int
		stripe    int64
		column    int
		component int
		objOff    int64
	}{
		// visit 0 → group 0, stripes 0,1
		{0, 0, 0, 0, 0, 0, 0},
		{0, 1, 0, 0, 1, 1, 0},
		{0, 2, 0, 0, 2, 2, 0}, // parity of stripe 0 on column 2
		{1, 0, 0, 1, 1, 1, 4096},
		{1, 2, 0, 1, 0, 0, 4096}, // parity rotated to column 0
		// visit 1 → group 1, stripes 0,1
		{2, 0, 1, 0, 0, 3, 0},
		{3, 2, 1, 1, 0, 3, 4096},
		// visit 2 → group 0 again, stripes 2,3
		{4, 0, 0, 2, 2, 2, 8192},
		{4, 2, 0, 2, 1, 1, 8192},
		{5, 1, 0, 3, 1, 1, 12288},
		// visit 3 → group 1, stripes 2,3
		{7, 2, 1, 3, 2, 5, 12288},
	} {
		got := l.UnitOf(tc.fs, tc.u)
		want := Unit{tc.group, tc.stripe, tc.column, tc.component, tc.objOff}
		if got != want {
			t.Errorf("UnitOf(fs=%d,u=%d) = %+v, want %+v", tc.fs, tc.u, got, want)
		}
	}
}

// TestParityRotation checks that over Width consecutive stripes of a group
// every column holds parity exactly M times and data exactly K times.
func TestParityRotation(t *testing.T) {
	for _, spec := range []string{"ec:4+2", "ec:3+1", "mirror:3", "stripe:5", "ec:8+3"} {
		s, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		l := Layout{Spec: s, Groups: 1, OSDs: make([]uint32, s.Width())}
		parity := make([]int, s.Width())
		for st := int64(0); st < int64(s.Width()); st++ {
			seen := map[int]bool{}
			for u := 0; u < s.Width(); u++ {
				c := l.Column(st, u)
				if seen[c] {
					t.Fatalf("%s stripe %d: column %d used twice", spec, st, c)
				}
				seen[c] = true
				if u >= s.K {
					parity[c]++
				}
			}
		}
		for c, n := range parity {
			if n != s.M {
				t.Errorf("%s: column %d holds parity %d times over %d stripes, want %d", spec, c, n, s.Width(), s.M)
			}
		}
	}
}

func TestSpans(t *testing.T) {
	l := Layout{Spec: Spec{EC, 2, 1, 4096, 1, false}, Groups: 1, OSDs: make([]uint32, 3)}
	var got []Span
	l.Spans(4000, 9000, func(s Span) bool { got = append(got, s); return true })
	want := []Span{
		{4000, 96, 0, 0, 4000},
		{4096, 4096, 0, 1, 0},
		{8192, 4096, 1, 0, 0},
		{12288, 712, 1, 1, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d spans %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("span %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestLayoutValidate(t *testing.T) {
	s, _ := Parse("ec:4+2")
	if err := (Layout{Spec: s, Groups: 1, OSDs: make([]uint32, 5)}).Validate(); err == nil {
		t.Fatal("5 components for ec:4+2 accepted")
	}
	if err := (Layout{Spec: s, Groups: 0}).Validate(); err == nil {
		t.Fatal("0 groups accepted")
	}
	if err := (Layout{Spec: s, Groups: 2, OSDs: make([]uint32, 12)}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestObjectLen(t *testing.T) {
	// ec:2+1, unit 4KiB, visit 2, two groups: file stripes hold 8KiB;
	// stripes 0,1 → group 0; 2,3 → group 1; 4,5 → group 0 (object stripes 2,3).
	l := Layout{Spec: Spec{EC, 2, 1, 4096, 2, false}, Groups: 2, OSDs: make([]uint32, 6)}
	for _, tc := range []struct {
		size int64
		comp int
		want int64
	}{
		{0, 0, 0},
		{1, 0, 4096},
		{1, 3, 0},           // group 1 holds nothing yet
		{8192 + 1, 2, 8192}, // stripe 1 → object stripe 1
		{3*8192 + 5, 4, 8192},
		{4*8192 + 5, 1, 3 * 4096}, // stripe 4 → group 0 object stripe 2
		{4*8192 + 5, 5, 8192},
	} {
		if got := l.ObjectLen(tc.size, tc.comp); got != tc.want {
			t.Errorf("ObjectLen(%d, %d) = %d, want %d", tc.size, tc.comp, got, tc.want)
		}
	}
}

// DataLen is where a dense writer's bytes end in each object: the end of
// the furthest unit of the group that holds file bytes, counted up to the
// stripe's data in unit 0 (writers send every unit at unit 0's length).
// Checked against a brute-force walk over every stripe.
func TestDataLen(t *testing.T) {
	for _, spec := range []string{"ec:4+2,unit=64KiB,visit=2", "mirror:3,unit=64KiB", "stripe:3,unit=4KiB,visit=1"} {
		s, err := Parse(spec)
		if err != nil {
			t.Fatal(err)
		}
		l := Layout{Spec: s, Groups: 3, OSDs: make([]uint32, 3*s.Width())}
		S, U := s.StripeBytes(), s.UnitBytes
		for _, size := range []int64{0, 1, 4095, U, U + 1, S - 1, S, S + 7, 5*S + U/2, 17*S + 3} {
			want := make([]int64, len(l.OSDs))
			for fs := int64(0); fs*S < size; fs++ {
				g, st := l.Locate(fs)
				for c := g * s.Width(); c < (g+1)*s.Width(); c++ {
					want[c] = max(want[c], st*U+min(size-fs*S, U))
				}
			}
			for c := range l.OSDs {
				if got := l.DataLen(size, c); got != want[c] || got > l.ObjectLen(size, c) {
					t.Fatalf("%s size %d component %d: DataLen %d, want %d (ObjectLen %d)", spec, size, c, got, want[c], l.ObjectLen(size, c))
				}
			}
		}
	}
}
