package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"sync"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Gathering small writes. The stripe a writer is filling from front to
// back is a stripe buffer (File.wb), sent as soon as it is whole. Any
// other write that leaves a stripe partly written is gathered instead:
// the stripe's written extents are kept, merged, as they are (a gathered
// stripe, not a stripe buffer), and writes that come back to the stripe
// land among them. A gathered stripe is read, completed, encoded and sent
// once, when it is flushed: at Sync and Close, by a read of its bytes,
// when another writer recalls its lock, before a truncation, or when the
// gathered extents would take more than parkLimit of the handle's
// MaxInflightBytes (oldest first). If its extents cover the stripe no
// read is needed at all.
//
// So 4 KiB writes at random places cost a copy each and one
// read-modify-write per stripe and flush, and they take memory for what
// they wrote, not for whole stripes: 16 MiB written at random over a
// file of any size is 16 MiB gathered (whole-stripe buffers, tried
// first, took 6 MiB per 4 KiB written to another stripe, so a file past
// the budget's 14 stripes sent a stripe through the two-phase commit for
// about every eighth write: 1.7–2.8 MB/s). Memory stays bounded by
// MaxInflightBytes; what is gathered is lost with the client, as any
// write not yet synced.

// gathered is the unsent writes to one stripe: extents of its data
// region, sorted by offset, neither overlapping nor touching.
type gathered struct {
	fs   int64
	ext  []extent
	mem  int64 // bytes of memory the extents hold (their capacity)
	sent bool  // flushed or dropped: a stale entry of File.parkOrder
}

type extent struct {
	off  int64 // in the stripe's data region
	data []byte
}

func (e extent) end() int64 { return e.off + int64(len(e.data)) }

// add lays p over the stripe's data region at off and returns how much
// more memory the extents hold. A write that extends an extent grows it
// as append does, so a run of small writes in order costs amortized
// copies, and an extent never holds more than maxBytes (the stripe).
func (g *gathered) add(off int64, p []byte, maxBytes int64) int64 {
	end := off + int64(len(p))
	i := sort.Search(len(g.ext), func(k int) bool { return g.ext[k].end() >= off })
	j := sort.Search(len(g.ext), func(k int) bool { return g.ext[k].off > end })
	if i == j { // touches nothing: a new extent
		e := extent{off: off, data: extentBuf(int64(len(p)), int64(len(p)))}
		copy(e.data, p)
		g.ext = slices.Insert(g.ext, i, e)
		g.mem += int64(cap(e.data))
		return int64(cap(e.data))
	}
	lo, hi := min(off, g.ext[i].off), max(end, g.ext[j-1].end())
	before := int64(0)
	for _, e := range g.ext[i:j] {
		before += int64(cap(e.data))
	}
	first := g.ext[i].data
	var data []byte
	if g.ext[i].off == lo && int64(cap(first)) >= hi-lo {
		data = first[:hi-lo]
	} else {
		c := hi - lo
		if g.ext[i].off == lo {
			c = min(max(c, 2*int64(cap(first))), maxBytes-lo) // grows as append would
		}
		data = extentBuf(hi-lo, max(c, hi-lo))
		copy(data[g.ext[i].off-lo:], first)
		wire.PutBuf(first)
	}
	for _, e := range g.ext[i+1 : j] {
		copy(data[e.off-lo:], e.data)
		wire.PutBuf(e.data)
	}
	copy(data[off-lo:], p)
	g.ext[i] = extent{off: lo, data: data}
	g.ext = slices.Delete(g.ext, i+1, j)
	delta := int64(cap(data)) - before
	g.mem += delta
	return delta
}

// pooledExtentBytes: extents of at least this many bytes live in pooled
// buffers (wire.GetBuf). A merge of large extents then costs one copy,
// where a fresh allocation also cost zeroing it and faulting its pages
// in (1 MiB blocks of two writers sharing stripes: 1.2 ms a write);
// smaller ones are made to measure, as a pooled buffer rounds up to a
// power of two and small extents would hold far more than they carry.
const pooledExtentBytes = 64 << 10

// extentBuf returns room for an extent of n bytes with capacity at
// least c: pooled where the pool's power-of-two size adds at most a
// quarter (an extent of a 3 MiB stripe would otherwise hold 4 MiB).
func extentBuf(n, c int64) []byte {
	if pooled := int64(1) << bits.Len64(uint64(c-1)); c >= pooledExtentBytes && pooled-c <= c/4 {
		return wire.GetBuf(int(c))[:n]
	}
	return make([]byte, n, c)
}

// covers reports whether the extents hold every byte of [0, n).
func (g *gathered) covers(n int64) bool {
	return n <= 0 || len(g.ext) == 1 && g.ext[0].off == 0 && g.ext[0].end() >= n
}

// gatherLocked adds p, written at in of stripe fs, to the stripe's
// gathered extents, first moving the stripe buffer's bytes there if it
// is the stripe being filled.
func (f *File) gatherLocked(fs, in int64, p []byte) {
	if wb := f.wb; wb != nil && wb.fs == fs {
		f.parkLocked()
	}
	g := f.parked[fs]
	if g == nil {
		g = f.newGathered(fs)
	}
	S := f.layout().Spec.StripeBytes()
	f.growParked(g, g.add(in, p, S))
	if !g.sent && g.covers(S) {
		f.sendGatheredLocked(g) // whole: nothing to wait for, as a whole stripe buffer is sent at once
	}
}

func (f *File) newGathered(fs int64) *gathered {
	if f.parked == nil {
		f.parked = map[int64]*gathered{}
	}
	g := &gathered{fs: fs}
	f.parked[fs] = g
	f.parkOrder = append(f.parkOrder, g)
	return g
}

// growParked accounts n more bytes g's extents hold: first it sends the
// oldest gathered stripes until all fit under parkLimit (g itself may go),
// and only then charges the bytes to the handle's budget. In that order
// the wait for budget ends: a stripe sent to make room needs one stripe
// buffer, and what is charged (at most parkLimit) leaves two, for the
// stripe being filled and that one; stripes in flight return theirs.
func (f *File) growParked(g *gathered, n int64) {
	if n <= 0 {
		// Extents merged into one that had the room: what they held is
		// free, and goes back (held, the budget drifted away for good).
		f.inflight.Release(-n)
		f.parkedBytes += n
		return
	}
	// Not charged yet: if making room sends g itself, it gives back only
	// what it was charged.
	g.mem -= n
	f.makeRoomLocked(n)
	if g.sent {
		return
	}
	_ = f.inflight.Acquire(context.Background(), n)
	g.mem += n
	f.parkedBytes += n
}

// parkLocked moves the stripe being filled to its stripe's gathered
// extents and gives back its buffer.
func (f *File) parkLocked() {
	wb := f.wb
	if wb == nil {
		return
	}
	f.wb = nil
	if wb.hi <= wb.lo {
		f.releaseStripe(wb)
		return
	}
	g := f.parked[wb.fs]
	if g == nil {
		g = f.newGathered(wb.fs)
	}
	n := g.add(wb.lo, wb.buf[wb.lo:wb.hi], f.layout().Spec.StripeBytes())
	f.releaseStripe(wb) // copied: its budget comes back before the bytes are charged
	f.growParked(g, n)
}

// unparkLocked takes g out of the gathered stripes, returning its budget.
func (f *File) unparkLocked(g *gathered) {
	if g.sent {
		return
	}
	g.sent = true
	delete(f.parked, g.fs)
	f.parkedBytes -= g.mem
	f.inflight.Release(g.mem)
	if stale := len(f.parkOrder) - len(f.parked); stale > 64 && stale > len(f.parked) {
		f.parkOrder = slices.DeleteFunc(f.parkOrder, func(g *gathered) bool { return g.sent })
	}
}

// makeRoomLocked sends the oldest gathered stripes until n more bytes
// fit under parkLimit.
func (f *File) makeRoomLocked(n int64) {
	for len(f.parkOrder) > 0 && f.parkedBytes+n > f.parkLimit {
		g := f.parkOrder[0]
		f.parkOrder = f.parkOrder[1:]
		if !g.sent {
			f.sendGatheredLocked(g)
		}
	}
}

// flushStripesLocked sends the buffered stripes in [lo, hi), in order:
// gathered ones and the one being filled.
func (f *File) flushStripesLocked(lo, hi int64) {
	var in []int64
	if hi-lo <= int64(len(f.parked)) {
		for fs := lo; fs < hi; fs++ {
			if f.parked[fs] != nil {
				in = append(in, fs)
			}
		}
	} else {
		for fs := range f.parked {
			if fs >= lo && fs < hi {
				in = append(in, fs)
			}
		}
		slices.Sort(in)
	}
	gs := make([]*gathered, len(in))
	for i, fs := range in {
		gs[i] = f.parked[fs]
	}
	f.sendGatheredLocked(gs...)
	if wb := f.wb; wb != nil && wb.fs >= lo && wb.fs < hi {
		f.submitLocked()
	}
}

// flushAllLocked sends every buffered stripe.
func (f *File) flushAllLocked() {
	f.flushStripesLocked(0, maxStripeNo)
	f.parkOrder = nil
	f.submitLocked()
}

// maxStripeNo is past every stripe of any file.
const maxStripeNo = int64(1) << 62

// dropBuffersLocked throws away every buffered stripe, unsent (an abort,
// or locks lost). It reports whether there was any.
func (f *File) dropBuffersLocked() bool {
	had := f.wb != nil || len(f.parked) > 0
	order := f.parkOrder // unparkLocked tidies f.parkOrder in place
	f.parkOrder = nil
	for _, g := range order {
		f.unparkLocked(g)
	}
	if f.wb != nil {
		f.releaseStripe(f.wb)
		f.wb = nil
	}
	return had
}

// fillersPerFlush bounds how many gathered stripes a flush reads at once.
// Their reads are the flush's critical path (sending is behind it), and
// one at a time they left the OSDs idle between stripes.
const fillersPerFlush = 4

// sendGatheredLocked sends gathered stripes gs: each read where its
// extents do not cover the stripe's bytes (once, the whole stripe; up to
// fillersPerFlush stripes at once), laid over with its extents, encoded
// and sent. Stripes that rewrite part of a stripe holding acknowledged
// data go through the two-phase commit together, as many in one intent
// as a stagedBatch holds (stage.go): a flush of many stripes pays for the intent's
// commits and each OSD's stage and apply once, not per stripe.
func (f *File) sendGatheredLocked(gs ...*gathered) {
	batch := newStagedBatch(f.layout())
	send := func() {
		if len(batch.ops) > 0 {
			f.sendBatchLocked(batch.ops)
			batch = newStagedBatch(f.layout())
		}
	}
	for len(gs) > 0 {
		ready, n := f.fillWindowLocked(gs[:min(len(gs), fillersPerFlush)], len(batch.ops) == 0)
		if n == 0 {
			send() // the batch holds the buffers this window waits for
			continue
		}
		gs = gs[n:]
		for i, wb := range ready.wbs {
			if !wb.staged {
				f.submitBufLocked(wb)
				continue
			}
			S := f.layout().Spec.StripeBytes()
			clear(wb.buf[ready.valids[i]:S])
			op := f.encodeStaged(wb, ready.valids[i])
			if op == nil {
				continue
			}
			if !batch.fits(op) {
				send()
			}
			batch.add(op)
		}
	}
	send()
}

// maxStageBytes bounds what one component stages for a batch (one
// request; the frame limit is wire.MaxDataBytes).
const maxStageBytes = 8 << 20

// stagedBatch is stripes that go through one intent, with what each
// component stages for them: within maxStageBytes and osdproto.MaxSegs.
type stagedBatch struct {
	lay   layout.Layout
	ops   []*stripeOp
	bytes map[int]int64
	segs  map[int]int
}

func newStagedBatch(lay layout.Layout) *stagedBatch {
	return &stagedBatch{lay: lay, bytes: map[int]int64{}, segs: map[int]int{}}
}

// each calls fn with every component op stages on, its bytes and
// segments.
func (b *stagedBatch) each(op *stripeOp, fn func(comp int, n int64, segs int) bool) bool {
	U := b.lay.Spec.UnitBytes
	for u := range b.lay.Spec.Width() {
		n, segs := U, 1
		if op.cols != nil {
			n, segs = 0, len(op.cols[u])
			for _, r := range op.cols[u] {
				n += r.hi - r.lo
			}
		}
		if !fn(b.lay.UnitOf(op.wb.fs, u).Component, n, segs) {
			return false
		}
	}
	return true
}

// fits reports whether op can join the batch (always, if it is empty).
func (b *stagedBatch) fits(op *stripeOp) bool {
	return len(b.ops) == 0 || b.each(op, func(c int, n int64, segs int) bool {
		return b.bytes[c]+n <= maxStageBytes && b.segs[c]+segs <= osdproto.MaxSegs
	})
}

func (b *stagedBatch) add(op *stripeOp) {
	b.ops = append(b.ops, op)
	b.each(op, func(c int, n int64, segs int) bool {
		b.bytes[c] += n
		b.segs[c] += segs
		return true
	})
}

// filledStripes are gathered stripes made whole, ready to send.
type filledStripes struct {
	wbs    []*stripeBuf
	valids []int64 // bytes of each stripe inside the file
}

// fillWindowLocked makes the first of gs, and as many more as stripe
// buffers are free for without waiting, whole: read in parallel where
// their extents do not cover them, laid over with the extents. The first
// waits for its buffer only if mayWait (gathered stripes leave room for
// one); it returns how many of gs it took, 0 if it could not wait.
func (f *File) fillWindowLocked(gs []*gathered, mayWait bool) (filledStripes, int) {
	type fill struct {
		g     *gathered
		wb    *stripeBuf
		valid int64
		cols  [][]colRange // what the stripe rewrites, if only some columns
		err   error
	}
	spec := f.layout().Spec
	S := spec.StripeBytes()
	var fills []*fill
	taken := 0
	for i, g := range gs {
		var wb *stripeBuf
		if i == 0 && mayWait {
			f.unparkLocked(g)
			wb = f.newStripeBuf(g.fs)
		} else if wb = f.tryNewStripeBuf(g.fs); wb == nil {
			break
		} else {
			f.unparkLocked(g)
		}
		taken++
		if err := f.stripeHeld(g.fs); err != nil {
			f.setErr(err)
			f.releaseStripe(wb)
			continue
		}
		wb.lo, wb.hi = 0, 0
		fl := &fill{g: g, wb: wb, valid: max(0, min(S, f.size-g.fs*S))}
		if start := g.fs * S; spec.M > 0 && start+S <= f.committed && fl.valid == S && !g.covers(S) {
			fl.cols = f.stripeCols(g.fs, g.ext)
		}
		fills = append(fills, fl)
	}
	var wg sync.WaitGroup
	for _, fl := range fills {
		if fl.g.covers(fl.valid) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.pending.waitStripe(fl.g.fs) // earlier writes to this stripe must land before it is read
			if fl.cols != nil {
				fl.err = f.fillColumns(fl.wb, fl.g.fs*S, fl.cols)
			} else {
				fl.err = f.fillStripeOnce(fl.wb, fl.g.fs*S, fl.valid)
			}
		}()
	}
	wg.Wait()
	var out filledStripes
	for _, fl := range fills {
		g, wb, start := fl.g, fl.wb, fl.g.fs*S
		if !g.covers(fl.valid) {
			if fl.err != nil && f.replayMayHelp() {
				fl.err = f.fillStripe(wb, start, fl.valid) // sends kept writes again first; reads the columns too
			}
			if fl.err != nil {
				f.setErr(fl.err)
				f.releaseStripe(wb)
				continue
			}
			wb.staged = start < f.committed && spec.M > 0
			wb.cols = fl.cols
		}
		wb.lo, wb.hi = 0, max(fl.valid, g.ext[len(g.ext)-1].end())
		for _, e := range g.ext {
			copy(wb.buf[e.off:], e.data)
			wire.PutBuf(e.data) // copied: nothing else holds the extents of a stripe no longer gathered
		}
		g.ext = nil
		out.wbs, out.valids = append(out.wbs, wb), append(out.valids, fl.valid)
	}
	return out, taken
}

// fillGapBytes is the widest run of columns a column fill reads, though
// no write needs it, to read its neighbours in one request.
const fillGapBytes = 32 << 10

// fillColumns reads, of a stripe whose writes rewrite only columns cols
// of its units, those columns of every data unit: all that computing
// the parity of those columns takes, since parity is computed column by
// column. The rest of the buffer is not the file's and is never sent
// (stripeOp.cols). A few random blocks in a stripe read a few blocks
// per unit, not the whole stripe.
func (f *File) fillColumns(wb *stripeBuf, start int64, cols [][]colRange) error {
	s := f.layout().Spec
	U := s.UnitBytes
	var need []colRange
	for _, rs := range cols {
		need = append(need, rs...)
	}
	slices.SortFunc(need, func(a, b colRange) int { return cmp.Compare(a.lo, b.lo) })
	var reads []colRange
	for _, r := range need {
		if n := len(reads); n > 0 && r.lo <= reads[n-1].hi+fillGapBytes {
			reads[n-1].hi = max(reads[n-1].hi, r.hi)
			continue
		}
		reads = append(reads, r)
	}
	errs := make([]error, s.K)
	var wg sync.WaitGroup
	for u := range s.K {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := int64(u) * U
			for _, r := range reads {
				if err := f.readRange(context.Background(), wb.buf[base+r.lo:base+r.hi], start+base+r.lo); err != nil {
					errs[u] = fmt.Errorf("read-modify-write of stripe %d: %w", wb.fs, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sendBatchLocked sends encoded stripes ops through one two-phase commit,
// behind the caller. They are pending from here on, not before: a flush
// of the OSDs waits for every pending stripe, and one while the batch
// was gathered would have waited for stripes only its caller could send.
func (f *File) sendBatchLocked(ops []*stripeOp) {
	if f.unsyncedBytes() >= f.maxUnsyncedBytes() {
		f.flushOSDs(context.Background())
	}
	for _, op := range ops {
		f.pending.begin(op.wb.fs)
	}
	go f.sendStaged(ops)
}

// colRange is a range of columns of a unit: bytes [lo, hi) of it.
type colRange struct{ lo, hi int64 }

// colAlign is the OSD's checksum block: a piece of a unit is sent in
// whole blocks, so the OSD never reads back a block to merge it.
const colAlign = 4096

// changedCols maps a stripe's changed ranges (extents of its data region)
// to the columns each of its K+M units must rewrite: a data unit its own
// part of them, and a parity unit (or a mirror's copy) every column any
// data unit changed, since each of its bytes is computed from that column
// of all data units. Columns are widened to whole blocks within the unit.
func changedCols(changed []extent, K, M int, U int64) [][]colRange {
	cols := make([][]colRange, K+M)
	var all []colRange
	for _, e := range changed {
		for u := e.off / U; u < int64(K) && u*U < e.end(); u++ {
			lo, hi := max(e.off, u*U)-u*U, min(e.end(), (u+1)*U)-u*U
			r := colRange{lo / colAlign * colAlign, min(U, (hi+colAlign-1)/colAlign*colAlign)}
			cols[u] = appendCols(cols[u], r)
			all = append(all, r)
		}
	}
	slices.SortFunc(all, func(a, b colRange) int { return cmp.Compare(a.lo, b.lo) })
	var union []colRange
	for _, r := range all {
		union = appendCols(union, r)
	}
	for j := K; j < K+M; j++ {
		cols[j] = union
	}
	return cols
}

// appendCols adds r, which starts at or after the last range's start, to
// sorted ranges rs, merging it with the last if they touch.
func appendCols(rs []colRange, r colRange) []colRange {
	if n := len(rs); n > 0 && r.lo <= rs[n-1].hi {
		rs[n-1].hi = max(rs[n-1].hi, r.hi)
		return rs
	}
	return append(rs, r)
}
