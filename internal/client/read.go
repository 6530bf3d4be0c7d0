package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// maxParallelUnitReads bounds the unit reads one ReadAt runs at once.
const maxParallelUnitReads = 64

// readAtStored reads len(p) stored bytes at off. Each piece is read from the OSD
// holding its data unit, all pieces in parallel; a piece whose OSD is down,
// times out or returns a corrupt block is rebuilt from the stripe's other
// units (degraded read).
func (f *File) readAtStored(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", wire.ErrInvalid)
	}
	f.mu.Lock()
	if f.write {
		// Read your own writes: buffered stripes the read covers go out.
		S := f.layout().Spec.StripeBytes()
		f.flushStripesLocked(off/S, (off+int64(len(p)))/S+1)
		f.submitLocked()
	}
	size := f.size
	f.mu.Unlock()
	f.pending.wait()
	if off >= size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), size-off)
	handled := false
	var err error
	if !f.write {
		handled, err = f.prefetchRead(p[:n], off, size)
	}
	if !handled {
		err = f.readRange(context.Background(), p[:n], off)
	}
	if err != nil && f.write && f.replayMayHelp() {
		// Kept writes are sent again, then the range read again.
		f.mu.Lock()
		f.flushOSDs(context.Background())
		f.mu.Unlock()
		err = f.readRange(context.Background(), p[:n], off)
	}
	if err != nil {
		return 0, err
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// readRange fills p with the file bytes at off (all below the size).
func (f *File) readRange(ctx context.Context, p []byte, off int64) error {
	lay := f.layout()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(maxParallelUnitReads)
	lay.Spans(off, int64(len(p)), func(s layout.Span) bool {
		dst := p[s.FileOff-off : s.FileOff-off+s.Len]
		g.Go(func() error { return f.readSpan(ctx, lay, s, dst) })
		return true
	})
	return g.Wait()
}

func (f *File) readSpan(ctx context.Context, lay layout.Layout, s layout.Span, dst []byte) error {
	loc := lay.UnitOf(s.Stripe, s.Unit)
	var err error
	if f.isDirty(loc.Component) {
		err = fmt.Errorf("component %d is dirty (missed writes or lost)", loc.Component)
	} else if err = f.readUnit(ctx, loc.Component, loc.ObjectOff+s.InUnit, dst, true); err == nil {
		return nil
	}
	if rerr := f.reconstruct(ctx, lay, s, dst); rerr != nil {
		return fmt.Errorf("%s: bytes %d-%d: %w (first failure: %v)", f.path, s.FileOff, s.FileOff+s.Len, rerr, err)
	}
	return nil
}

// readUnit reads object bytes [off, off+len(dst)) of component comp and
// vouches for them (vouch): a component found lost is an ErrCorrupt
// error and, with mark, is recorded dirty at the MDS so a healer
// rewrites it.
func (f *File) readUnit(ctx context.Context, comp int, off int64, dst []byte, mark bool) error {
	stale, err := f.readUnitOnce(ctx, comp, off, dst, mark)
	if stale {
		_, err = f.readUnitOnce(ctx, comp, off, dst, mark) // vouched for with the MDS's extents now
	}
	return err
}

// readUnitOnce is readUnit once; stale says the handle's extents were
// out of date and have been renewed.
func (f *File) readUnitOnce(ctx context.Context, comp int, off int64, dst []byte, mark bool) (stale bool, err error) {
	version := f.layout().Version
	req := osdproto.Req{Off: off, Len: uint32(len(dst))}
	meta, err := f.unitCall(ctx, osdproto.OpRead, comp, req, nil, dst)
	objectLen := int64(-1) // unusable as a whole, unless the reply says more
	if err == nil && f.layout().Version != version && f.isDirty(comp) {
		// The call refreshed the layout (a repair fenced the old one) and
		// the component is being rewritten now: its object may have holes
		// not filled yet, so it is read around, not trusted.
		return false, wire.Errorf(wire.ErrUnavail, "%s: component %d is being rebuilt", f.path, comp)
	}
	if err == nil {
		objectLen, err = f.vouchFor(comp, meta, off, int64(len(dst)))
	}
	switch {
	case !mark:
	case errors.Is(err, wire.ErrLost): // the object as a whole: a healer rewrites the component
		stale = f.markLost(ctx, version, err, comp, objectLen)
	case errors.Is(err, wire.ErrCorrupt): // a block failed its checksum: a scrub rewrites the bad units
		f.requestScrub()
	}
	return stale, err
}

// requestScrub asks the MDS, once per handle and in the background, to
// scrub the file: a reader met a block that failed its checksum.
func (f *File) requestScrub() {
	f.scrubOnce.Do(func() {
		f.c.notify(mdsproto.OpScrub, mdsproto.ScrubReq{Ino: f.layoutIno()})
	})
}

// extentOf is how far component comp's object holds written data as the
// MDS recorded it (0 if it has no record).
func (f *File) extentOf(comp int) int64 {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	if g := comp / f.lay.Spec.Width(); g < len(f.ext) {
		return f.ext[g]
	}
	return 0
}

// vouchFor checks an OSD's reply to this handle's read of object bytes
// [off, off+n) of comp (vouch) and returns the object's length (-1 if the
// reply does not say).
func (f *File) vouchFor(comp int, meta []byte, off, n int64) (int64, error) {
	info, err := osdproto.ReadReply(meta)
	if err != nil {
		return -1, fmt.Errorf("%s: component %d: %w", f.path, comp, err)
	}
	if f.write && f.staleBoot(comp, info.Boot) {
		// Its OSD may have lost this handle's unsynced writes (so the
		// object may look lost): read around it, and send them again
		// before a retry.
		f.replayWanted.Store(true)
		return -1, wire.Errorf(wire.ErrUnavail, "%s: component %d: %v", f.path, comp, ErrOSDRestarted)
	}
	if err := osdproto.Vouch(info, off, n, f.extentOf(comp)); err != nil {
		return info.Len, fmt.Errorf("%s: component %d: %w", f.path, comp, err)
	}
	return info.Len, nil
}

var errNoSurvivors = errors.New("no other unit could be read")

// reconstruct rebuilds the piece s of a data unit from the same byte range
// of the stripe's other units. Reed-Solomon works column by column, so
// only the range asked for is read from each survivor.
func (f *File) reconstruct(ctx context.Context, lay layout.Layout, s layout.Span, dst []byte) error {
	spec := lay.Spec
	width := spec.Width()
	if spec.M == 0 {
		return fmt.Errorf("%w: layout %s has no redundancy", wire.ErrUnavail, spec)
	}
	shards := make([][]byte, width)
	var mu sync.Mutex
	var failures []error
	var wg sync.WaitGroup
	for u := 0; u < width; u++ {
		loc := lay.UnitOf(s.Stripe, u)
		if u == s.Unit || f.isDirty(loc.Component) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := wire.GetBuf(int(s.Len))
			err := f.readUnit(ctx, loc.Component, loc.ObjectOff+s.InUnit, buf, true)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				wire.PutBuf(buf)
				failures = append(failures, err)
				return
			}
			shards[u] = buf
		}()
	}
	wg.Wait()
	defer func() {
		for _, b := range shards {
			if b != nil && cap(b) > 0 {
				wire.PutBuf(b)
			}
		}
	}()
	have := 0
	for _, b := range shards {
		if b != nil {
			have++
		}
	}
	if have < spec.K {
		var dirty []int
		for u := 0; u < width; u++ {
			if c := lay.UnitOf(s.Stripe, u).Component; u != s.Unit && f.isDirty(c) {
				dirty = append(dirty, c)
			}
		}
		return fmt.Errorf("%w: stripe %d has %d of the %d units needed (%s; dirty components %v): %w",
			wire.ErrUnavail, s.Stripe, have, spec.K, spec, dirty, errors.Join(append(failures, errNoSurvivors)...))
	}
	if err := f.enc.ReconstructData(shards); err != nil {
		return fmt.Errorf("%w: reconstruct stripe %d: %v", wire.ErrUnavail, s.Stripe, err)
	}
	copy(dst, shards[s.Unit])
	shards[s.Unit] = nil // allocated by the codec, not pooled
	return nil
}

// readAheadDepth is how many windows WriteTo keeps in flight.
const readAheadDepth = 4

// writeToStored copies the file's stored bytes to w, reading ahead
// several windows of whole stripes in parallel while earlier ones are
// written out.
func (f *File) writeToStored(w io.Writer) (int64, error) {
	if f.write {
		f.mu.Lock()
		f.flushAllLocked() // read your own writes
		f.mu.Unlock()
		f.pending.wait()
	}
	size := f.storedSize()
	S := f.layout().Spec.StripeBytes()
	window := max(S, (8<<20)/S*S)
	type chunk struct {
		buf  []byte
		err  error
		done chan struct{}
	}
	start := func(off int64) *chunk {
		c := &chunk{buf: wire.GetBuf(int(min(window, size-off))), done: make(chan struct{})}
		go func() {
			defer close(c.done)
			c.err = f.readRange(context.Background(), c.buf, off) // its own read-ahead: not the prefetcher's
		}()
		return c
	}
	var queue []*chunk
	next, written := int64(0), int64(0)
	defer func() {
		for _, c := range queue {
			<-c.done
			wire.PutBuf(c.buf)
		}
	}()
	for written < size {
		for len(queue) < readAheadDepth && next < size {
			queue = append(queue, start(next))
			next += window
		}
		c := queue[0]
		queue = queue[1:]
		<-c.done
		if c.err != nil {
			wire.PutBuf(c.buf)
			return written, c.err
		}
		n, err := w.Write(c.buf)
		written += int64(n)
		wire.PutBuf(c.buf)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}
