package braid

// Gathering small writes. A stripe a writer leaves partly written is not
// sent at once: it is parked, and writes that come back to it land in
// the same buffer. The first write that is not contiguous with what a
// buffer holds fills it with the stripe's current bytes (one read of the
// stripe), after which any write to the stripe is a copy. The stripe is
// read, encoded and sent once, when it is flushed: at Sync and Close, by
// a read of its bytes, when another writer recalls its lock, before a
// truncation, or when parked buffers would take more than parkLimit of
// the handle's MaxInflightBytes (oldest first). So 4 KiB writes at random
// places cost one read-modify-write per stripe and flush, not one each
// (which went through the two-phase commit every time). Memory stays
// bounded by MaxInflightBytes; what is parked is lost with the client,
// as any write not yet synced.

// parkLocked moves the stripe being filled to the parked buffers.
func (f *File) parkLocked() {
	wb := f.wb
	if wb == nil {
		return
	}
	f.wb = nil
	if f.parkLimit <= 0 {
		f.submitBufLocked(wb)
		return
	}
	if f.parked == nil {
		f.parked = map[int64]*stripeBuf{}
	}
	f.parked[wb.fs] = wb
	f.parkOrder = append(f.parkOrder, wb.fs)
	f.parkedBytes += int64(len(wb.buf))
}

// unparkLocked takes stripe fs's parked buffer, if there is one.
func (f *File) unparkLocked(fs int64) *stripeBuf {
	wb := f.parked[fs]
	if wb == nil {
		return nil
	}
	delete(f.parked, fs)
	f.parkedBytes -= int64(len(wb.buf))
	for i, p := range f.parkOrder {
		if p == fs {
			f.parkOrder = append(f.parkOrder[:i], f.parkOrder[i+1:]...)
			break
		}
	}
	return wb
}

// makeRoomLocked sends the oldest parked stripes until n more bytes of
// buffers fit under parkLimit.
func (f *File) makeRoomLocked(n int64) {
	for len(f.parkOrder) > 0 && f.parkedBytes+n > f.parkLimit {
		f.submitBufLocked(f.unparkLocked(f.parkOrder[0]))
	}
}

// flushStripesLocked sends the buffered stripes in [lo, hi): parked ones
// and the one being filled.
func (f *File) flushStripesLocked(lo, hi int64) {
	for _, fs := range append([]int64(nil), f.parkOrder...) {
		if fs >= lo && fs < hi {
			f.submitBufLocked(f.unparkLocked(fs))
		}
	}
	if wb := f.wb; wb != nil && wb.fs >= lo && wb.fs < hi {
		f.submitLocked()
	}
}

// flushAllLocked sends every buffered stripe.
func (f *File) flushAllLocked() {
	for len(f.parkOrder) > 0 {
		f.submitBufLocked(f.unparkLocked(f.parkOrder[0]))
	}
	f.submitLocked()
}

// dropBuffersLocked throws away every buffered stripe, unsent (an abort,
// or locks lost). It reports whether there was any.
func (f *File) dropBuffersLocked() bool {
	had := f.wb != nil || len(f.parkOrder) > 0
	for len(f.parkOrder) > 0 {
		f.releaseStripe(f.unparkLocked(f.parkOrder[0]))
	}
	if f.wb != nil {
		f.releaseStripe(f.wb)
		f.wb = nil
	}
	return had
}

// fillInPlaceLocked gives a stripe buffer the stripe's current bytes
// around what was written into it, so any write to the stripe can land
// in it: it is then whole (lo 0, hi the stripe), and sent as it is.
func (f *File) fillInPlaceLocked(wb *stripeBuf) error {
	S := f.layout().Spec.StripeBytes()
	start := wb.fs * S
	valid := max(0, min(S, f.size-start))
	if wb.lo > 0 || wb.hi < valid {
		f.pending.wait() // earlier writes to this stripe must land before it is read
		if err := f.fillStripe(wb, start, valid); err != nil {
			return err
		}
		// Part of a stripe that holds acknowledged data is rewritten:
		// through the two-phase commit, as submitBufLocked would decide
		// had it filled the buffer itself (found by review: sent as plain
		// unit writes).
		wb.staged = start < f.committed && f.layout().Spec.M > 0
	}
	clear(wb.buf[max(valid, wb.hi):S]) // past the end: holes, whatever the pool left there
	wb.lo, wb.hi, wb.filled = 0, S, true
	return nil
}
