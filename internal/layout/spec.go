// Package layout is braid's per-file data placement: the layout-spec grammar
// (stripe:W, mirror:N, ec:K+M with unit= and visit=) and the pure arithmetic
// that maps a file byte offset to a parity group, a stripe, a unit, a
// component object and an offset inside that object. It does no I/O.
package layout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Scheme is the redundancy scheme of a layout.
type Scheme uint8

const (
	Stripe Scheme = iota + 1 // RAID 0: K data units, no redundancy
	Mirror                   // N full copies: K=1, M=N-1
	EC                       // Reed-Solomon: K data + M parity units
)

func (s Scheme) String() string {
	switch s {
	case Stripe:
		return "stripe"
	case Mirror:
		return "mirror"
	case EC:
		return "ec"
	}
	return fmt.Sprintf("scheme(%d)", uint8(s))
}

// Limits on what a spec may ask for. They bound memory per stripe and keep
// the arithmetic far from overflow.
const (
	MaxWidth        = 64       // K+M units in one parity group
	MinUnitBytes    = 4 << 10  // smallest stripe unit
	MaxUnitBytes    = 16 << 20 // largest stripe unit
	MaxVisit        = 1024     // stripes per visit
	DefaultUnit     = 1 << 20  // stripe unit when the spec names none
	DefaultVisit    = 8        // stripes per visit when the spec names none
	SmallFileBytes  = 64 << 10 // files up to this size are mirrored, not coded
	maxSpecTextSize = 256
	MaxStripeBytes  = 256 << 20 // Width × unit: the memory one stripe buffer needs
)

// ErrBadSpec is wrapped by every spec parse or validation error.
var ErrBadSpec = errors.New("bad layout spec")

// Spec is a parsed layout spec: how a file is spread, before placement.
type Spec struct {
	Scheme    Scheme
	K         int   // data units per stripe (stripe: W, mirror: 1)
	M         int   // redundant units per stripe (mirror: N-1)
	UnitBytes int64 // stripe unit size
	Visit     int   // stripes stacked in one parity group before moving on
	// Sealed files are encrypted by the client before coding (enc=aes-gcm;
	// the format is internal/seal's).
	Sealed bool
}

// SealCipher is the one value of the enc= option.
const SealCipher = "aes-gcm"

// Width is the number of components in one parity group.
func (s Spec) Width() int { return s.K + s.M }

// StripeBytes is the file data held by one stripe.
func (s Spec) StripeBytes() int64 { return int64(s.K) * s.UnitBytes }

// Tolerates is how many components of a parity group may be lost.
func (s Spec) Tolerates() int { return s.M }

// String renders the spec in canonical form; Parse(s.String()) == s.
func (s Spec) String() string {
	var b strings.Builder
	switch s.Scheme {
	case Stripe:
		fmt.Fprintf(&b, "stripe:%d", s.K)
	case Mirror:
		fmt.Fprintf(&b, "mirror:%d", s.M+1)
	case EC:
		fmt.Fprintf(&b, "ec:%d+%d", s.K, s.M)
	default:
		return "invalid"
	}
	fmt.Fprintf(&b, ",unit=%s,visit=%d", FormatSize(s.UnitBytes), s.Visit)
	if s.Sealed {
		b.WriteString(",enc=" + SealCipher)
	}
	return b.String()
}

// Validate checks the spec's own limits (not whether a cluster can hold it).
func (s Spec) Validate() error {
	switch s.Scheme {
	case Stripe:
		if s.K < 1 || s.M != 0 {
			return fmt.Errorf("%w: stripe width must be at least 1", ErrBadSpec)
		}
	case Mirror:
		if s.K != 1 || s.M < 0 {
			return fmt.Errorf("%w: mirror needs at least 1 copy", ErrBadSpec)
		}
	case EC:
		if s.K < 1 || s.M < 1 {
			return fmt.Errorf("%w: ec needs K>=1 data and M>=1 parity units", ErrBadSpec)
		}
	default:
		return fmt.Errorf("%w: unknown scheme", ErrBadSpec)
	}
	if s.Width() > MaxWidth {
		return fmt.Errorf("%w: width %d exceeds %d", ErrBadSpec, s.Width(), MaxWidth)
	}
	if s.UnitBytes < MinUnitBytes || s.UnitBytes > MaxUnitBytes || s.UnitBytes%MinUnitBytes != 0 {
		return fmt.Errorf("%w: unit %d must be a multiple of 4KiB between 4KiB and 16MiB", ErrBadSpec, s.UnitBytes)
	}
	if int64(s.Width())*s.UnitBytes > MaxStripeBytes {
		return fmt.Errorf("%w: width %d × unit %s exceeds %s per stripe", ErrBadSpec, s.Width(), FormatSize(s.UnitBytes), FormatSize(MaxStripeBytes))
	}
	if s.Sealed && s.UnitBytes < 2*MinUnitBytes {
		// A unit holds whole sealed blocks (4 KiB and their nonce and tag).
		return fmt.Errorf("%w: enc needs a unit of at least %s", ErrBadSpec, FormatSize(2*MinUnitBytes))
	}
	if s.Visit < 1 || s.Visit > MaxVisit {
		return fmt.Errorf("%w: visit %d must be in 1..%d", ErrBadSpec, s.Visit, MaxVisit)
	}
	return nil
}

// Parse reads a layout spec such as "ec:4+2,unit=1MiB,visit=4,enc=aes-gcm".
func Parse(text string) (Spec, error) {
	if len(text) > maxSpecTextSize {
		return Spec{}, fmt.Errorf("%w: too long", ErrBadSpec)
	}
	parts := strings.Split(strings.TrimSpace(text), ",")
	s, err := parseScheme(strings.TrimSpace(parts[0]))
	if err != nil {
		return Spec{}, err
	}
	s.UnitBytes, s.Visit = DefaultUnit, DefaultVisit
	for _, opt := range parts[1:] {
		if err := s.applyOption(strings.TrimSpace(opt)); err != nil {
			return Spec{}, err
		}
	}
	if err := s.Validate(); err != nil {
		return Spec{}, fmt.Errorf("%q: %w", text, err)
	}
	return s, nil
}

func parseScheme(text string) (Spec, error) {
	name, arg, ok := strings.Cut(text, ":")
	if !ok {
		return Spec{}, fmt.Errorf("%w: %q: want stripe:W, mirror:N or ec:K+M", ErrBadSpec, text)
	}
	switch strings.ToLower(name) {
	case "stripe":
		w, err := smallInt(arg)
		return Spec{Scheme: Stripe, K: w}, err
	case "mirror":
		n, err := smallInt(arg)
		return Spec{Scheme: Mirror, K: 1, M: n - 1}, err
	case "ec":
		ks, ms, ok := strings.Cut(arg, "+")
		if !ok {
			return Spec{}, fmt.Errorf("%w: %q: want ec:K+M", ErrBadSpec, text)
		}
		k, err := smallInt(ks)
		if err != nil {
			return Spec{}, err
		}
		m, err := smallInt(ms)
		return Spec{Scheme: EC, K: k, M: m}, err
	}
	return Spec{}, fmt.Errorf("%w: unknown scheme %q", ErrBadSpec, name)
}

func (s *Spec) applyOption(opt string) error {
	key, val, ok := strings.Cut(opt, "=")
	if !ok {
		return fmt.Errorf("%w: option %q: want key=value", ErrBadSpec, opt)
	}
	switch strings.ToLower(strings.TrimSpace(key)) {
	case "unit":
		n, err := ParseSize(val)
		if err != nil {
			return err
		}
		s.UnitBytes = n
	case "visit":
		n, err := smallInt(val)
		if err != nil {
			return err
		}
		s.Visit = n
	case "enc":
		switch v := strings.ToLower(strings.TrimSpace(val)); v {
		case SealCipher:
			s.Sealed = true
		case "none":
			s.Sealed = false
		default:
			return fmt.Errorf("%w: enc=%s: the cipher is %s (or none)", ErrBadSpec, v, SealCipher)
		}
	default:
		return fmt.Errorf("%w: unknown option %q", ErrBadSpec, key)
	}
	return nil
}

func smallInt(text string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil || n < 0 || n > 1<<20 {
		return 0, fmt.Errorf("%w: %q is not a small non-negative integer", ErrBadSpec, text)
	}
	return n, nil
}

var sizeSuffixes = []struct {
	suffix string
	shift  uint
}{
	{"kib", 10}, {"mib", 20}, {"gib", 30}, {"k", 10}, {"m", 20}, {"g", 30}, {"b", 0},
}

// ParseSize reads a byte count such as 4096, 64KiB, 1MiB or 1G (binary units).
func ParseSize(text string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(text))
	shift := uint(0)
	for _, s := range sizeSuffixes {
		if strings.HasSuffix(t, s.suffix) {
			t, shift = strings.TrimSpace(strings.TrimSuffix(t, s.suffix)), s.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<40)>>shift {
		return 0, fmt.Errorf("%w: bad size %q", ErrBadSpec, text)
	}
	return n << shift, nil
}

// FormatSize renders a byte count with the largest exact binary suffix.
func FormatSize(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}
