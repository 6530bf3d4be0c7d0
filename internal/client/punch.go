package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// maxPunchStripes bounds the stripes one staged write punches: a
// component takes one unit of each, so its stage stays within
// osdproto.MaxSegs segments even where none of them merge.
const maxPunchStripes = osdproto.MaxSegs

// punchStored makes bytes [off, off+n) of the file read as zeros and keeps
// its size (fallocate's PUNCH_HOLE and ZERO_RANGE: braid reserves no
// space, so the two are one). The stripes the range covers wholly are
// punched on every OSD, data and parity alike (parity over zeros is
// zeros), through staged writes, so a crash leaves each stripe either as
// it was or a hole; their space goes back to the OSDs' disks. The pieces
// of stripes at the range's ends are written with zeros as any write is;
// a layout without redundancy (stripe:K) punches those too, its units
// being independent. What the file held past its end stays as it was:
// nothing.
//
// Every write before it is made durable first: a write its OSD lost to a
// power cut is sent again at a sync, and must not land over the hole.
// A range of more than maxPunchStripes stripes is punched in pieces, each
// atomic; a failure leaves the handle failed, as a failed write does.
func (f *File) punchStored(off, n int64) error {
	if !f.write {
		return errReadOnly
	}
	if off < 0 || n <= 0 || off > math.MaxInt64-n {
		return fmt.Errorf("%w: punch of %d bytes at %d", wire.ErrInvalid, n, off)
	}
	lay := f.layout()
	S := lay.Spec.StripeBytes()
	n = min(n, max(0, lay.MaxSize()-off))
	lo, hi := stripesOf(off, n, S)
	ctx := context.Background()
	unlock, err := f.lockStripes(ctx, lo, hi)
	if err != nil {
		return err
	}
	defer unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	if err := f.stickyErr(); err != nil {
		return err
	}
	end := min(off+n, f.size)
	if off >= end {
		return nil
	}
	f.modified, f.timesKept = true, false
	from, to := off, end // what the OSDs punch
	if lay.Spec.M > 0 {
		// Only whole stripes (parity over zeros is zeros); a plain
		// stripe's units are independent, so it punches every piece.
		w0, w1 := wholeStripes(off, end, f.size, S)
		if w0 >= w1 {
			f.zeroLocked(off, end)
			return nil
		}
		f.zeroLocked(off, w0*S)
		f.zeroLocked(w1*S, end)
		from, to = w0*S, w1*S // every unit whole, past the end too
	}
	f.flushAllLocked()
	f.flushOSDs(ctx)
	if err := f.stickyErr(); err != nil {
		return err
	}
	return f.punchStripesLocked(ctx, from, to)
}

// punchStripesLocked punches [off, end), the stripes it touches staged
// maxPunchStripes at a time.
func (f *File) punchStripesLocked(ctx context.Context, off, end int64) error {
	S := f.layout().Spec.StripeBytes()
	for a := off / S; a*S < end; a += maxPunchStripes {
		r0, r1 := max(off, a*S), min(end, (a+maxPunchStripes)*S)
		if err := f.punchStripes(ctx, r0, r1); err != nil {
			f.setErr(fmt.Errorf("%s: punch bytes %d-%d: %w", f.path, r0, r1-1, err))
			return f.stickyErr()
		}
	}
	return nil
}

// wholeStripes is the stripes [w0, w1) that the range [off, end) of a
// file of size bytes covers wholly: the last stripe counts if the range
// reaches the end of the file.
func wholeStripes(off, end, size, S int64) (w0, w1 int64) {
	w0, w1 = (off+S-1)/S, end/S
	if end == size {
		w1 = (end + S - 1) / S
	}
	return w0, w1
}

// zeroLocked writes zeros over [off, end) through the buffers, as
// WriteAt does; the range lies inside at most two stripes.
func (f *File) zeroLocked(off, end int64) {
	if off < end {
		f.bufferLocked(make([]byte, end-off), off)
	}
}

// punchStripes punches bytes [off, end) of the file, at most
// maxPunchStripes stripes, on every component through one staged write,
// staging it again if a repair moves the layout meanwhile.
func (f *File) punchStripes(ctx context.Context, off, end int64) error {
	var err error
	for try := 0; try < maxStripeSends; try++ {
		s := f.snap()
		comps, byComp := holesOf(s, off, end)
		if err = f.twoPhaseUnits(ctx, s, comps, byComp); !errors.Is(err, errLayoutMoved) {
			return err
		}
		if err = f.refresh(ctx, s.cap); err != nil {
			return err
		}
	}
	return err
}

// holesOf is the pieces of units that bytes [off, end) of the file
// cover, by component, as segments of zeros, those next to each other
// in an object merged. A unit past the K data units (parity, a mirror's
// copies) is taken whole: with redundancy, the range is whole stripes.
func holesOf(s fileSnap, off, end int64) (comps []int, byComp map[int][]stagedUnit) {
	byComp = map[int][]stagedUnit{}
	spec := s.lay.Spec
	U, S := spec.UnitBytes, spec.StripeBytes()
	for fs := off / S; fs*S < end; fs++ {
		for u := 0; u < spec.Width(); u++ {
			lo, hi := int64(0), U
			if u < spec.K {
				base := fs*S + int64(u)*U
				lo, hi = max(off, base)-base, min(end, base+U)-base
			}
			if lo >= hi {
				continue
			}
			loc := s.lay.UnitOf(fs, u)
			if byComp[loc.Component] == nil {
				comps = append(comps, loc.Component)
			}
			byComp[loc.Component] = append(byComp[loc.Component], stagedUnit{off: loc.ObjectOff + lo, zero: hi - lo})
		}
	}
	for c, units := range byComp {
		slices.SortFunc(units, func(x, y stagedUnit) int { return cmp.Compare(x.off, y.off) })
		merged := units[:1]
		for _, u := range units[1:] {
			if last := &merged[len(merged)-1]; last.end() == u.off && last.zero+u.zero <= osdproto.MaxZeroSegBytes {
				last.zero += u.zero
				continue
			}
			merged = append(merged, u)
		}
		byComp[c] = merged
	}
	return comps, byComp
}
