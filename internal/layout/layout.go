package layout

import "fmt"

// Layout is a spec placed on OSDs: the map an MDS hands a client. Component
// c of the file is an object on OSD OSDs[c]; components are numbered group
// by group, Width() per group.
type Layout struct {
	Spec    Spec
	Groups  int      // parity groups the file is spread over (>= 1)
	OSDs    []uint32 // OSD id holding each component, len Groups*Width
	Version uint64   // bumped whenever components move; OSDs refuse older
}

// Validate checks the layout's internal consistency (untrusted input path).
func (l Layout) Validate() error {
	if err := l.Spec.Validate(); err != nil {
		return err
	}
	if l.Groups < 1 || l.Groups*l.Spec.Width() > 4096 {
		return fmt.Errorf("%w: %d groups", ErrBadSpec, l.Groups)
	}
	if len(l.OSDs) != l.Groups*l.Spec.Width() {
		return fmt.Errorf("%w: %d components for %d groups of %d", ErrBadSpec, len(l.OSDs), l.Groups, l.Spec.Width())
	}
	return nil
}

// Unit locates one unit of one stripe of the file.
type Unit struct {
	Group     int   // parity group
	Stripe    int64 // stripe number inside the group's objects
	Column    int   // column inside the group, 0..Width-1
	Component int   // index into Layout.OSDs
	ObjectOff int64 // offset of the unit's first byte inside the component object
}

// Locate maps file stripe fs (file bytes [fs*S, (fs+1)*S) with S the stripe
// size) to its parity group and to the stripe number inside that group's
// objects. Two-level striping (Panasas visits): Visit consecutive file
// stripes go to one group, then the next group takes the next Visit.
func (l Layout) Locate(fs int64) (group int, stripe int64) {
	visit := int64(l.Spec.Visit)
	v := fs / visit
	group = int(v % int64(l.Groups))
	stripe = (v/int64(l.Groups))*visit + fs%visit
	return group, stripe
}

// Column is the column holding logical unit u of a group's stripe s, where
// units 0..K-1 carry data and K..K+M-1 carry parity (or copies). The
// assignment rotates by one column per stripe so parity load spreads over
// every OSD of the group (RAID 5 style; Sigma's rotating parity node).
func (l Layout) Column(stripe int64, u int) int {
	w := int64(l.Spec.Width())
	return int((int64(u) + stripe%w) % w)
}

// UnitOf locates logical unit u (data or parity) of file stripe fs.
func (l Layout) UnitOf(fs int64, u int) Unit {
	g, s := l.Locate(fs)
	col := l.Column(s, u)
	return Unit{
		Group:     g,
		Stripe:    s,
		Column:    col,
		Component: g*l.Spec.Width() + col,
		ObjectOff: s * l.Spec.UnitBytes,
	}
}

// Span is a piece of a file range that falls inside one data unit.
type Span struct {
	FileOff int64 // first file byte of the piece
	Len     int64
	Stripe  int64 // file stripe number
	Unit    int   // data unit inside the stripe, 0..K-1
	InUnit  int64 // offset of the piece inside its unit
}

// Spans cuts the file range [off, off+n) into pieces that each lie in one
// data unit, in file order, and calls fn for each until it returns false.
func (l Layout) Spans(off, n int64, fn func(Span) bool) {
	unit, k := l.Spec.UnitBytes, int64(l.Spec.K)
	for end := off + n; off < end; {
		u := off / unit
		in := off % unit
		piece := min(unit-in, end-off)
		if !fn(Span{FileOff: off, Len: piece, Stripe: u / k, Unit: int(u % k), InUnit: in}) {
			return
		}
		off += piece
	}
}

// ObjectLen is the length component c's object needs for a file of size
// bytes: through the end of the last stripe of c's group that holds file
// data. Truncation cuts objects to this length.
func (l Layout) ObjectLen(size int64, c int) int64 {
	if size <= 0 {
		return 0
	}
	g := c / l.Spec.Width()
	last := (size - 1) / l.Spec.StripeBytes()
	span := int64(l.Groups * l.Spec.Visit) // one visit of every group
	for fs := last; fs >= 0 && fs > last-span; fs-- {
		if fg, s := l.Locate(fs); fg == g {
			return (s + 1) * l.Spec.UnitBytes
		}
	}
	return 0
}

// DataLen is how far component c's object holds data for a file of size
// bytes written densely: ObjectLen, except that the group's last stripe
// holding file data is written only as far as its data reaches (writers
// send every unit of a stripe at unit 0's length, no further).
func (l Layout) DataLen(size int64, c int) int64 {
	if size <= 0 {
		return 0
	}
	g := c / l.Spec.Width()
	S, U := l.Spec.StripeBytes(), l.Spec.UnitBytes
	last := (size - 1) / S
	span := int64(l.Groups * l.Spec.Visit)
	for fs := last; fs >= 0 && fs > last-span; fs-- {
		if fg, s := l.Locate(fs); fg == g {
			return s*U + min(size-fs*S, U)
		}
	}
	return 0
}

// MaxObjectBytes bounds offsets and lengths inside one component object
// (256 TiB), so offset arithmetic never overflows.
const MaxObjectBytes = 1 << 48

// MaxSize is the largest file the layout holds with every object within
// MaxObjectBytes: the data columns' capacity, less one round of visits
// (visits interleave groups, so the last round may fill one group first).
func (l Layout) MaxSize() int64 {
	data := int64(l.Spec.K) * int64(l.Groups) * MaxObjectBytes
	return data - int64(l.Groups*l.Spec.Visit)*l.Spec.StripeBytes()
}
