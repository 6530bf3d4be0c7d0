package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// stripeBuf holds one file stripe being written: K data units back to
// back, then M parity units (erasure-coded layouts only).
type stripeBuf struct {
	fs     int64  // file stripe number
	buf    []byte // pooled; len(buf) bytes are reserved from File.inflight
	lo, hi int64  // bytes of the data region the writer has filled
	whole  bool   // write every unit at full length (truncation rewrites)
	// staged: the write changes part of a stripe holding committed data,
	// so it goes through the two-phase commit (stage, intent, apply).
	staged bool
	// cols, if not nil, are the only columns of each unit a staged
	// stripe rewrites (a gathered stripe wholly inside the committed
	// file, whose other bytes the OSDs hold with their parity;
	// stripeCols). Its buffer may hold only those columns.
	cols [][]colRange
}

func stripeBufBytes(s layout.Spec) int64 {
	n := s.StripeBytes()
	if s.Scheme == layout.EC {
		n += int64(s.M) * s.UnitBytes
	}
	return n
}

// newStripeBuf takes a stripe buffer, waiting while the file already has
// MaxInflightBytes of stripes in flight (back-pressure on the writer).
func (f *File) newStripeBuf(fs int64) *stripeBuf {
	n := stripeBufBytes(f.layout().Spec)
	_ = f.inflight.Acquire(context.Background(), n)
	return &stripeBuf{fs: fs, buf: wire.GetBuf(int(n)), lo: -1, hi: -1}
}

// tryNewStripeBuf takes a stripe buffer if the budget has room for one
// now, else returns nil.
func (f *File) tryNewStripeBuf(fs int64) *stripeBuf {
	n := stripeBufBytes(f.layout().Spec)
	if !f.inflight.TryAcquire(n) {
		return nil
	}
	return &stripeBuf{fs: fs, buf: wire.GetBuf(int(n)), lo: -1, hi: -1}
}

func (f *File) releaseStripe(wb *stripeBuf) {
	f.inflight.Release(int64(len(wb.buf)))
	wire.PutBuf(wb.buf)
}

var errReadOnly = fmt.Errorf("%w: file not open for writing", wire.ErrDenied)

// writeAtStored writes stored bytes p at off. Data is gathered into
// whole stripes and sent behind the caller; errors from earlier writes
// surface here, in Sync and in Close.
func (f *File) writeAtStored(p []byte, off int64) (int, error) {
	if !f.write {
		return 0, errReadOnly
	}
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", wire.ErrInvalid)
	}
	lay := f.layout()
	if off > lay.MaxSize()-int64(len(p)) {
		return 0, wire.Errorf(wire.ErrTooBig, "%s: write past the %d bytes layout %s holds", f.path, lay.MaxSize(), lay.Spec)
	}
	lo, hi := stripesOf(off, int64(len(p)), lay.Spec.StripeBytes())
	unlock, err := f.lockStripes(context.Background(), lo, hi)
	if err != nil {
		return 0, err
	}
	defer unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return 0, os.ErrClosed
	}
	if err := f.stickyErr(); err != nil {
		return 0, err
	}
	f.bufferLocked(p, off)
	return len(p), nil
}

// bufferLocked takes p, for the file at off, into the stripe being filled
// or the gathered ones; whole stripes go out at once. The caller holds mu
// and the write lock on the stripes.
func (f *File) bufferLocked(p []byte, off int64) {
	S := f.layout().Spec.StripeBytes()
	for n := 0; n < len(p); {
		o := off + int64(n)
		fs, in := o/S, o%S
		piece := min(S-in, int64(len(p)-n))
		f.setSizeLocked(max(f.size, o+piece))
		f.modified, f.timesKept = true, false
		if wb := f.wb; f.parked[fs] != nil || wb != nil && wb.fs == fs && (in > wb.hi || in+piece < wb.lo) {
			// Not the stripe being filled front to back: gathered.
			f.gatherLocked(fs, in, p[n:n+int(piece)])
			n += int(piece)
			continue
		}
		if wb := f.wb; wb != nil && wb.fs != fs {
			f.parkLocked() // the writer moved to another stripe; it may come back (gather.go)
		}
		if f.wb == nil {
			f.wb = f.newStripeBuf(fs)
			f.wb.lo, f.wb.hi = in, in
		}
		copy(f.wb.buf[in:in+piece], p[n:])
		f.wb.lo, f.wb.hi = min(f.wb.lo, in), max(f.wb.hi, in+piece)
		if f.wb.lo == 0 && f.wb.hi == S {
			f.submitLocked() // a whole stripe written: sent at once
		}
		n += int(piece)
	}
}

// submitLocked sends the buffered stripe. A partly filled stripe is first
// completed with the file's current bytes (read-modify-write), so parity
// is always computed over the whole stripe.
func (f *File) submitLocked() {
	wb := f.wb
	f.wb = nil
	f.submitBufLocked(wb)
}

// submitBufLocked sends stripe buffer wb (see submitLocked).
func (f *File) submitBufLocked(wb *stripeBuf) {
	if wb == nil {
		return
	}
	if err := f.stripeHeld(wb.fs); err != nil {
		f.setErr(err)
		f.releaseStripe(wb)
		return
	}
	if f.unsyncedBytes() >= f.maxUnsyncedBytes() {
		f.flushOSDs(context.Background())
	}
	spec := f.layout().Spec
	S := spec.StripeBytes()
	start := wb.fs * S
	valid := min(S, f.size-start)
	if wb.lo > 0 || wb.hi < valid {
		f.pending.waitStripe(wb.fs) // earlier writes to this stripe must land before it is read
		if err := f.fillStripe(wb, start, valid); err != nil {
			f.setErr(err)
			f.releaseStripe(wb)
			return
		}
		wb.staged = start < f.committed && spec.M > 0
	}
	f.clearPastValid(wb, valid)
	f.encodeAndSend(wb, valid)
}

// clearPastValid zeros what encoding reads of stripe wb past its first
// valid bytes: each data unit's first shardLen bytes (newStripeOp), not
// the whole stripe. A 4 KiB file in a stripe of four 1 MiB units cleared
// 4 MiB at every close, most of the mount's CPU for small files.
func (f *File) clearPastValid(wb *stripeBuf, valid int64) {
	s := f.layout().Spec
	shardLen := min(valid, s.UnitBytes)
	if wb.whole {
		shardLen = s.UnitBytes
	}
	for u := int64(0); u < int64(s.K); u++ {
		if lo, hi := max(u*s.UnitBytes, valid), u*s.UnitBytes+shardLen; lo < hi {
			clear(wb.buf[lo:hi])
		}
	}
}

// fillStripe reads the parts of the stripe's first valid bytes that the
// writer did not supply.
func (f *File) fillStripe(wb *stripeBuf, start, valid int64) error {
	err := f.fillStripeOnce(wb, start, valid)
	if err != nil && f.replayMayHelp() {
		// Kept writes are sent again, then the stripe read again.
		f.flushOSDs(context.Background())
		err = f.fillStripeOnce(wb, start, valid)
	}
	return err
}

func (f *File) fillStripeOnce(wb *stripeBuf, start, valid int64) error {
	ctx := context.Background()
	if wb.lo > 0 {
		if err := f.readRange(ctx, wb.buf[:wb.lo], start); err != nil {
			return fmt.Errorf("read-modify-write of stripe %d: %w", wb.fs, err)
		}
	}
	if wb.hi < valid {
		if err := f.readRange(ctx, wb.buf[wb.hi:valid], start+wb.hi); err != nil {
			return fmt.Errorf("read-modify-write of stripe %d: %w", wb.fs, err)
		}
	}
	return nil
}

// stripeOp tracks the unit writes of one stripe.
type stripeOp struct {
	f       *File
	wb      *stripeBuf
	m       int      // failures the layout tolerates
	shards  [][]byte // every unit's bytes, data then redundancy
	version uint64   // layout version the units were sent under
	tries   int
	mu      sync.Mutex
	left    int
	failed  []error
	nospace error
	kept    bool // an OSD took a unit: the buffer is kept until the sync
	ec      bool // parity is computed (erasure-coded layout)
	sync    bool // units are sent synced (File.syncWrites)
	// cols, if not nil, are the only columns of each unit the stripe's
	// writes changed (gather.go): a staged write sends just those.
	cols [][]colRange
	// pieces, once compacted, are those columns' bytes, pieces[u][i]
	// those of cols[u][i], and shards are gone (compact).
	pieces [][][]byte
}

// maxStripeSends bounds how often one stripe is sent again because the
// file's layout changed while it was in flight.
const maxStripeSends = 3

// encodeAndSend computes the stripe's redundancy and writes every unit to
// its OSD in parallel. Only the first valid bytes of the stripe are file
// data. Every unit is written over the same columns the parity covers
// (shardLen: unit 0's length), zeros past the data included, because an
// object may hold bytes past the file's size (a writer that crashed before
// committing) that parity must not be computed against. Columns past
// shardLen lie past the file's end in every unit and are not sent.
func (f *File) encodeAndSend(wb *stripeBuf, valid int64) {
	op := f.newStripeOp(wb, valid)
	f.pending.begin(wb.fs)
	// Encoding and sending run behind the writer, so the next stripe is
	// filled while this one is coded (the buffer is the stripe's alone).
	go func() {
		if !op.encode() {
			return
		}
		if wb.staged {
			f.sendStaged([]*stripeOp{op})
			return
		}
		op.send()
	}()
}

// encodeStaged lays out and encodes whole stripe wb (valid bytes of it
// inside the file) for a staged write, and compacts it: it returns nil
// if encoding failed. The stripe is not pending until its batch is sent
// (sendBatchLocked): a flush that waits for pending stripes meanwhile
// (flushOSDs) must not wait for it.
func (f *File) encodeStaged(wb *stripeBuf, valid int64) *stripeOp {
	op := f.newStripeOp(wb, valid)
	if err := op.code(); err != nil {
		f.setErr(err)
		f.releaseStripe(wb) // not pending: finish is not for it
		return nil
	}
	op.compact()
	return op
}

// compact keeps, of a stripe that rewrites only some columns, just those
// columns' bytes, in a buffer of their size, and gives the rest of the
// stripe buffer back to the handle's budget at once. A flush of many
// stripes that each changed a few blocks then sends them all through one
// intent, instead of waiting for one batch's whole stripe buffers to come
// back before filling the next.
func (op *stripeOp) compact() {
	if op.cols == nil {
		return
	}
	n := 0
	for _, rs := range op.cols {
		for _, r := range rs {
			n += int(r.hi - r.lo)
		}
	}
	if n >= len(op.wb.buf) {
		return // not smaller (a mirror's copies share one unit's buffer)
	}
	buf := wire.GetBuf(n)
	op.pieces = make([][][]byte, len(op.cols))
	at := 0
	for u, rs := range op.cols {
		for _, r := range rs {
			p := buf[at : at+int(r.hi-r.lo)]
			copy(p, op.shards[u][r.lo:r.hi])
			op.pieces[u] = append(op.pieces[u], p)
			at += len(p)
		}
	}
	wb := op.wb
	op.f.inflight.Release(int64(len(wb.buf) - n))
	wire.PutBuf(wb.buf)
	wb.buf, op.shards = buf, nil // the shards were the stripe buffer's
}

// newStripeOp lays out the units of stripe wb, whose first valid bytes
// are file data, for encoding and sending.
func (f *File) newStripeOp(wb *stripeBuf, valid int64) *stripeOp {
	s := f.layout().Spec
	K, M, U := s.K, s.M, s.UnitBytes
	shardLen := min(valid, U)
	if wb.whole {
		shardLen = U
	}
	shards := make([][]byte, K+M)
	for u := 0; u < K; u++ {
		shards[u] = wb.buf[int64(u)*U : int64(u)*U+shardLen]
	}
	switch s.Scheme {
	case layout.EC:
		for j := 0; j < M; j++ {
			off := int64(K)*U + int64(j)*U
			shards[K+j] = wb.buf[off : off+shardLen]
		}
	case layout.Mirror:
		for j := 1; j <= M; j++ {
			shards[j] = shards[0] // copies share the buffer
		}
	}
	op := &stripeOp{f: f, wb: wb, m: M, shards: shards, ec: s.Scheme == layout.EC, sync: f.syncWrites}
	if wb.cols != nil && shardLen == U {
		op.cols = wb.cols
	}
	wb.cols = nil
	return op
}

// stripeCols is the columns each unit of stripe fs rewrites when its
// writes changed only ranges changed of it (changedCols). Over a hole
// (the file grew by truncation) every unit also writes its last block,
// so the group's objects all reach the stripe's end, as the extent then
// says.
func (f *File) stripeCols(fs int64, changed []extent) [][]colRange {
	s := f.layout().Spec
	cols := changedCols(changed, s.K, s.M, s.UnitBytes)
	if !f.objectsHold(fs) {
		for u := range cols {
			cols[u] = appendCols(cols[u], colRange{s.UnitBytes - colAlign, s.UnitBytes})
		}
	}
	return cols
}

// objectsHold reports whether every object of stripe fs is vouched to
// hold written data through the stripe's units (the inode's extents).
// Extents are kept per parity group: pieces written into a hole must not
// leave the group's objects ending at different places, or the shorter
// ones are taken for lost.
func (f *File) objectsHold(fs int64) bool {
	lay := f.layout()
	for u := range lay.Spec.K + lay.Spec.M {
		loc := lay.UnitOf(fs, u)
		if f.extentOf(loc.Component) < loc.ObjectOff+lay.Spec.UnitBytes {
			return false
		}
	}
	return true
}

// encode computes the stripe's parity (erasure-coded layouts); a failure
// is the file's error and ends the stripe's write.
func (op *stripeOp) encode() bool {
	if err := op.code(); err != nil {
		op.f.setErr(err)
		op.finish()
		return false
	}
	return true
}

// code computes the stripe's parity (erasure-coded layouts).
func (op *stripeOp) code() error {
	if !op.ec {
		return nil
	}
	if err := op.f.enc.Encode(op.shards); err != nil {
		return fmt.Errorf("encode stripe %d: %w", op.wb.fs, err)
	}
	return nil
}

// send writes every unit under the file's current layout.
func (op *stripeOp) send() {
	f := op.f
	lay := f.layout()
	op.mu.Lock()
	op.version, op.left, op.failed, op.nospace = lay.Version, len(op.shards), nil, nil
	op.tries++
	op.mu.Unlock()
	for u, data := range op.shards {
		loc := lay.UnitOf(op.wb.fs, u)
		go func() {
			req := osdproto.Req{Off: loc.ObjectOff, Flags: f.mustExist(loc.Component)}
			if op.sync {
				req.Flags |= osdproto.FlagSync
			}
			wr, err := osdproto.WriteReplyOf(f.unitCall(context.Background(), osdproto.OpWrite, loc.Component, req, data, nil))
			op.done(loc.Component, loc.ObjectOff, data, wr, err)
		}()
	}
}

// done records one unit write's outcome: a failed unit marks its
// component dirty, a written one extends what the next commit records.
func (op *stripeOp) done(comp int, off int64, data []byte, wr osdproto.WriteReply, err error) {
	f := op.f
	kept := err == nil
	if err != nil {
		// Kept to be sent again at the next flush of the OSDs: once it
		// lands the component has caught up, and needs no rebuild.
		kept = f.markMissed(context.Background(), fmt.Errorf("unit write failed: %w", err), comp, off, data)
	} else {
		f.checkCreated(context.Background(), comp, wr.Created)
		f.noteWritten(comp, off+int64(len(data)))
		f.keepWrite(comp, off, data, wr.Boot, op.sync)
	}
	op.mu.Lock()
	op.kept = op.kept || kept
	if err != nil {
		op.failed = append(op.failed, err)
		if errors.Is(err, wire.ErrNoSpace) && op.nospace == nil {
			op.nospace = err
		}
	}
	op.left--
	last := op.left == 0
	op.mu.Unlock()
	if !last {
		return
	}
	// A repair that moved or fenced components while these units were on
	// their way may have read the stripe half old, half new: send it whole
	// again under the new layout so every unit agrees.
	if f.layout().Version != op.version && op.tries < maxStripeSends && op.nospace == nil {
		op.send()
		return
	}
	switch {
	case op.nospace != nil:
		f.setErr(op.nospace) // a full OSD is the user's to know about, even if redundancy covers it
	case len(op.failed) > op.m:
		f.setErr(fmt.Errorf("%w: stripe %d: %d unit writes failed, layout tolerates %d: %w",
			wire.ErrUnavail, op.wb.fs, len(op.failed), op.m, errors.Join(op.failed...)))
	}
	op.finish()
}

func (op *stripeOp) finish() {
	if op.kept {
		op.f.keepStripe(op.wb) // its units are kept writes until the sync
	} else {
		op.f.releaseStripe(op.wb)
	}
	op.f.pending.end(op.wb.fs)
}

// readFromStored copies r into the file's stored bytes from offset 0
// onwards. Data is read straight into stripe buffers, so a byte is copied
// once on its way from r to the OSDs.
func (f *File) readFromStored(r io.Reader) (int64, error) {
	if !f.write {
		return 0, errReadOnly
	}
	S := f.layout().Spec.StripeBytes()
	f.mu.Lock()
	f.flushAllLocked() // parked buffers would hold the budget newStripeBuf waits for
	f.mu.Unlock()
	var total int64
	for {
		wb := f.newStripeBuf(total / S)
		n, err := io.ReadFull(r, wb.buf[:S])
		if n == 0 {
			f.releaseStripe(wb)
		} else if aerr := f.adoptStripe(wb, int64(n)); aerr != nil {
			return total, aerr
		}
		total += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// adoptStripe takes a stripe buffer whose first n bytes the caller filled
// as the file's data at the start of stripe wb.fs: sent now if full,
// buffered (like a WriteAt) otherwise.
func (f *File) adoptStripe(wb *stripeBuf, n int64) error {
	unlock, err := f.lockStripes(context.Background(), wb.fs, wb.fs+1)
	if err != nil {
		f.releaseStripe(wb)
		return err
	}
	defer unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.stickyErr(); err != nil || f.closed {
		f.releaseStripe(wb)
		if err == nil {
			err = os.ErrClosed
		}
		return err
	}
	f.flushAllLocked() // a parked buffer of this stripe would land over it later
	wb.lo, wb.hi = 0, n
	f.wb = wb
	f.setSizeLocked(max(f.size, wb.fs*f.layout().Spec.StripeBytes()+n))
	f.modified, f.timesKept = true, false
	if n == f.layout().Spec.StripeBytes() {
		f.submitLocked()
	}
	return nil
}

// truncateStored sets the file's stored size. Shrinking rewrites the
// stripe holding the new end with zeros past it and cuts every object, so
// bytes beyond the size are never left behind to reappear if the file
// grows again.
func (f *File) truncateStored(size int64) error {
	if !f.write {
		return errReadOnly
	}
	if size < 0 {
		return fmt.Errorf("%w: negative size", wire.ErrInvalid)
	}
	lay := f.layout()
	if size > lay.MaxSize() {
		return wire.Errorf(wire.ErrTooBig, "%s: size %d past the %d bytes layout %s holds", f.path, size, lay.MaxSize(), lay.Spec)
	}
	// Every stripe from the lower of the old and new end on is rewritten
	// or cut: no other writer may be in one meanwhile. The grant may lower
	// this handle's view of the size (another truncated the file), so the
	// range is checked again once the lock is held.
	S := lay.Spec.StripeBytes()
	lo := min(size, f.storedSize()) / S
	for try := 0; ; try++ {
		unlock, err := f.lockStripes(context.Background(), lo, mdsproto.MaxStripe)
		if err != nil {
			return err
		}
		f.mu.Lock()
		if need := min(size, f.size) / S; need < lo {
			f.mu.Unlock()
			unlock()
			if try == maxLockTries {
				return wire.Errorf(wire.ErrBusy, "%s: truncate: the file's size kept changing under its lock", f.path)
			}
			lo = need
			continue
		}
		defer unlock()
		break
	}
	defer f.mu.Unlock()
	f.flushAllLocked()
	f.pending.wait()
	if err := f.stickyErr(); err != nil {
		return err
	}
	// Growing first cuts the objects at the old size: bytes past it that a
	// crashed writer left behind must read as zeros, not reappear.
	if err := f.shrinkLocked(min(size, f.size)); err != nil {
		return err
	}
	f.setSizeLocked(size)
	f.modified, f.timesKept = true, false
	return f.commitLocked(context.Background())
}

func (f *File) shrinkLocked(size int64) error {
	lay := f.layout()
	S := lay.Spec.StripeBytes()
	if rem := size % S; rem != 0 {
		wb := f.newStripeBuf(size / S)
		if err := f.readRange(context.Background(), wb.buf[:rem], size-rem); err != nil {
			f.releaseStripe(wb)
			return err
		}
		clear(wb.buf[rem:S])
		wb.whole, wb.lo, wb.hi = true, 0, rem
		wb.staged = size-rem < f.committed && lay.Spec.M > 0
		f.encodeAndSend(wb, rem)
		f.pending.wait()
		if err := f.stickyErr(); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	for c := range lay.OSDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := osdproto.Req{Off: lay.ObjectLen(size, c), Flags: f.mustExist(c)}
			wr, err := osdproto.WriteReplyOf(f.unitCall(context.Background(), osdproto.OpTruncate, c, req, nil, nil))
			if err != nil {
				_ = f.markDirty(context.Background(), fmt.Errorf("truncate failed: %w", err), c)
				return
			}
			f.checkCreated(context.Background(), c, wr.Created)
		}()
	}
	wg.Wait()
	// Every object now ends where the new size puts it: the extents the
	// commit records are these, whatever they were before.
	f.amu.Lock()
	f.wrote, f.cut = make([]int64, lay.Groups), true
	for g := range f.wrote {
		f.wrote[g] = lay.ObjectLen(size, g*lay.Spec.Width())
	}
	f.amu.Unlock()
	return f.checkRedundancy()
}
