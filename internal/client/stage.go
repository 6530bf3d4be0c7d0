package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/braidfs/braid/internal/capability"
	stagedwrite "github.com/braidfs/braid/internal/core/staged"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Two-phase commit of partial-stripe writes (Sigma, Slice). Overwriting
// part of a stripe that holds acknowledged data rewrites its parity; if
// that were done in place and the writer died half-way, parity would no
// longer match the untouched data, and a later OSD loss would decode
// garbage. So such a stripe is written as:
//
//  1. intent recorded at the MDS (which units, which layout version);
//  2. every unit staged on its OSD (durable, object untouched);
//  3. intent committed at the MDS — the commit point;
//  4. every stage applied to its object, then the intent closed.
//
// A crash before 3 leaves the old stripe (the MDS's resolver drops the
// stages); after 3 the resolver applies whatever the client did not. A
// unit whose OSD fails is marked dirty before the commit point.

// errLayoutMoved says a repair changed the layout under a staged write;
// the stripe is staged again under the new one.
var errLayoutMoved = errors.New("layout moved during staged write")

// fileSnap is a consistent view of a file's layout and capability.
type fileSnap struct {
	ino uint64
	lay layout.Layout
	cap capability.Cap
	eps map[uint32]mdsproto.Endpoint
}

func (f *File) snap() fileSnap {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	return fileSnap{ino: f.ino, lay: f.lay, cap: f.cap, eps: f.eps}
}

// call sends one request for component comp under the snapshot, without
// refreshing: a staged write must not drift to another layout half-way.
func (f *File) snapCall(ctx context.Context, s fileSnap, op uint16, comp int, req osdproto.Req, data [][]byte) ([]byte, error) {
	id := s.lay.OSDs[comp]
	ep, ok := s.eps[id]
	if !ok || !ep.Up {
		return nil, wire.Errorf(wire.ErrUnavail, "OSD %d (component %d) is down", id, comp)
	}
	req.Cap, req.Ino, req.Comp = s.cap, s.ino, uint32(comp)
	meta, err := f.callOSD(ctx, ep.Addr, op, req, data, nil)
	if err != nil {
		return nil, fmt.Errorf("OSD %d component %d: %w", id, comp, err)
	}
	return meta, nil
}

// sendStaged writes stripes ops (one, or a batch a flush gathered)
// through one two-phase commit, staging them again if a repair moves the
// layout meanwhile.
func (f *File) sendStaged(ops []*stripeOp) {
	ctx := context.Background()
	var err error
	for try := 0; try < maxStripeSends; try++ {
		s := f.snap()
		if err = f.twoPhase(ctx, s, ops); !errors.Is(err, errLayoutMoved) {
			break
		}
		if err = f.refresh(ctx, s.cap); err != nil {
			break
		}
	}
	if err != nil {
		f.setErr(fmt.Errorf("%s: stripes %d-%d: %w", f.path, ops[0].wb.fs, ops[len(ops)-1].wb.fs, err))
	}
	for _, op := range ops {
		op.finish()
	}
}

type unitResult struct {
	comp int
	err  error
}

// eachComp runs fn for every component in parallel.
func eachComp(comps []int, fn func(i, comp int) error) []unitResult {
	out := make([]unitResult, len(comps))
	var wg sync.WaitGroup
	for i, c := range comps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = unitResult{comp: c, err: fn(i, c)}
		}()
	}
	wg.Wait()
	return out
}

// stagedUnit is a piece of a batch's stripes: bytes for its component at
// off (a unit, or the part of one the stripe's writes changed), or, for
// a punched hole, zeros zero bytes of zeros (no op, no data).
type stagedUnit struct {
	op   *stripeOp
	off  int64
	data []byte
	zero int64
}

// end is where the piece ends in its object.
func (u stagedUnit) end() int64 { return u.off + int64(len(u.data)) + u.zero }

// stageOf is what one component stages for a batch: its pieces' bytes,
// sent one after another as the request's data (not copied together),
// and, if there are several, their segments.
func stageOf(units []stagedUnit, txid uint64) (osdproto.Req, [][]byte) {
	req := osdproto.Req{Off: units[0].off, Txid: txid}
	if len(units) == 1 && units[0].zero == 0 {
		return req, [][]byte{units[0].data}
	}
	data := make([][]byte, 0, len(units))
	for _, u := range units {
		if u.zero > 0 {
			req.Segs = append(req.Segs, osdproto.Seg{Off: u.off, Len: uint32(u.zero), Zero: true})
			continue
		}
		req.Segs = append(req.Segs, osdproto.Seg{Off: u.off, Len: uint32(len(u.data))})
		data = append(data, u.data)
	}
	return req, data
}

// piecesOf is what the batch's stripes write, by component, in object
// order: every unit whole, or of a stripe whose writes changed only some
// columns (stripeOp.cols), those columns of the units they touch.
func piecesOf(s fileSnap, ops []*stripeOp) (comps []int, byComp map[int][]stagedUnit) {
	byComp = map[int][]stagedUnit{}
	for _, op := range ops {
		for u := range max(len(op.shards), len(op.pieces)) {
			loc := s.lay.UnitOf(op.wb.fs, u)
			var pieces []stagedUnit
			switch {
			case op.pieces != nil:
				for i, r := range op.cols[u] {
					pieces = append(pieces, stagedUnit{op: op, off: loc.ObjectOff + r.lo, data: op.pieces[u][i]})
				}
			case op.cols != nil:
				for _, r := range op.cols[u] {
					pieces = append(pieces, stagedUnit{op: op, off: loc.ObjectOff + r.lo, data: op.shards[u][r.lo:r.hi]})
				}
			default:
				pieces = []stagedUnit{{op: op, off: loc.ObjectOff, data: op.shards[u]}}
			}
			if len(pieces) == 0 {
				continue
			}
			if byComp[loc.Component] == nil {
				comps = append(comps, loc.Component)
			}
			byComp[loc.Component] = append(byComp[loc.Component], pieces...)
		}
	}
	for _, units := range byComp {
		slices.SortFunc(units, func(a, b stagedUnit) int { return cmp.Compare(a.off, b.off) })
	}
	return comps, byComp
}

// twoPhase writes stripes ops through one intent: every component stages
// all its pieces of them at once (one stage, one fsync), so a flush of
// many stripes costs three MDS commits and one stage and apply per
// component, not per stripe.
func (f *File) twoPhase(ctx context.Context, s fileSnap, ops []*stripeOp) error {
	comps, byComp := piecesOf(s, ops)
	for _, c := range comps {
		byComp[c] = holesIn(byComp[c], f.extentOf(c))
	}
	return f.twoPhaseUnits(ctx, s, comps, byComp)
}

// minHoleBytes is the shortest run of zero blocks inside a piece that
// holesIn punches: shorter ones are not worth a segment.
const minHoleBytes = 4 * colAlign

// holesIn turns the runs of whole zero blocks in pieces units of one
// component, inside what its object is vouched to hold (held), into
// segments of zeros: the OSD punches them, so zeros written over data
// (the ends of a punched hole, a program writing zeros) give their blocks
// back. A data unit's blocks go whenever they are zero, a parity unit's
// when the column is zero in every data unit. A piece wholly of zero
// blocks goes whole; inside a piece, runs of at least minHoleBytes, while
// the component's stage stays within osdproto.MaxSegs segments. Past the
// vouched end zeros stay data: punching extends no object, and the
// extents must stay true.
func holesIn(units []stagedUnit, held int64) []stagedUnit {
	out := make([]stagedUnit, 0, len(units))
	for i, u := range units {
		if len(u.data) == 0 {
			out = append(out, u)
			continue
		}
		room := osdproto.MaxSegs - len(out) - (len(units) - i)
		out = append(out, splitZeros(u, held, room)...)
	}
	return out
}

// splitZeros cuts piece u into data and runs of zero blocks inside held,
// adding at most room pieces.
func splitZeros(u stagedUnit, held int64, room int) []stagedUnit {
	lo := (u.off + colAlign - 1) / colAlign * colAlign // first whole block
	if u.off%colAlign == 0 && len(u.data)%colAlign == 0 && u.end() <= held && osdproto.AllZero(u.data) {
		return []stagedUnit{{op: u.op, off: u.off, zero: int64(len(u.data))}}
	}
	var out []stagedUnit
	at := u.off // start of the data not yet taken
	for b := lo; b+colAlign <= min(u.end(), held) && room >= 2; {
		if !osdproto.AllZero(u.data[b-u.off : b-u.off+colAlign]) {
			b += colAlign
			continue
		}
		e := b + colAlign
		for e+colAlign <= min(u.end(), held) && osdproto.AllZero(u.data[e-u.off:e-u.off+colAlign]) {
			e += colAlign
		}
		if e-b >= minHoleBytes {
			if b > at {
				out = append(out, stagedUnit{op: u.op, off: at, data: u.data[at-u.off : b-u.off]})
			}
			out = append(out, stagedUnit{op: u.op, off: b, zero: e - b})
			at, room = e, room-2
		}
		b = e
	}
	if at < u.end() {
		out = append(out, stagedUnit{op: u.op, off: at, data: u.data[at-u.off:]})
	}
	return out
}

// twoPhaseUnits writes pieces byComp of components comps through one
// intent (twoPhase).
func (f *File) twoPhaseUnits(ctx context.Context, s fileSnap, comps []int, byComp map[int][]stagedUnit) error {
	if len(comps) == 0 {
		return nil
	}
	txid := rand.Uint64() | 1
	m := s.lay.Spec.Tolerates()
	ireq := mdsproto.IntentReq{Ino: s.ino, Handle: f.handle, Txid: txid, Version: s.lay.Version, Comps: toU32s(comps)}
	if err := f.c.mdsWaitBusy(ctx, mdsproto.OpIntentBegin, ireq, nil); err != nil {
		if errors.Is(err, wire.ErrStale) {
			return errLayoutMoved
		}
		return fmt.Errorf("record intent: %w", err)
	}
	staged := eachComp(comps, func(_, c int) error {
		req, data := stageOf(byComp[c], txid)
		_, err := f.snapCall(ctx, s, osdproto.OpStage, c, req, data)
		return err
	})
	var ok []int
	var errs []error
	for _, r := range staged {
		if r.err == nil {
			ok = append(ok, r.comp)
		} else {
			errs = append(errs, r.err)
		}
	}
	abort := func(cause error) error {
		eachComp(ok, func(_, c int) error {
			_, err := f.snapCall(ctx, s, osdproto.OpAbort, c, osdproto.Req{Txid: txid}, nil)
			return err
		})
		_ = f.c.mds(ctx, mdsproto.OpIntentDone, mdsproto.IntentReq{Ino: s.ino, Txid: txid}, nil)
		return cause
	}
	switch d := stagedwrite.Staged(outcomes(staged, true), m, s.lay.Spec.Width()); {
	case d.Restage:
		return abort(errLayoutMoved)
	case d.Abort:
		return abort(fmt.Errorf("%w: %d units could not be staged, layout tolerates %d: %w",
			wire.ErrUnavail, len(errs), m, errors.Join(errs...)))
	case len(d.MarkDirty) > 0:
		if err := f.markDirty(ctx, fmt.Errorf("staged write failed: %w", errors.Join(errs...)), d.MarkDirty...); err != nil {
			return abort(err)
		}
	}
	if err := f.c.mds(ctx, mdsproto.OpIntentCommit, mdsproto.IntentReq{Ino: s.ino, Txid: txid}, nil); err != nil {
		return abort(fmt.Errorf("commit intent: %w", err))
	}
	boots := make([]uint64, len(ok))
	applied := eachComp(ok, func(i, c int) (err error) {
		boots[i], err = f.applyStage(ctx, s, c, txid)
		return err
	})
	var applyErrs []error
	for i, r := range applied {
		if r.err != nil {
			applyErrs = append(applyErrs, r.err)
			continue
		}
		for _, u := range byComp[r.comp] {
			if u.zero > 0 {
				continue // a hole: the object keeps its length, and nothing waits to be sent again
			}
			f.noteWritten(r.comp, u.end())
			// Applied is durable, but writes under it its OSD took and
			// may lose to a power cut are sent again at the sync: it is
			// kept with them, to be sent again after them.
			f.keepWrite(r.comp, u.off, u.data, boots[i], false)
			u.op.kept = true
		}
	}
	d := stagedwrite.Applied(outcomes(applied, false))
	if len(d.MarkDirty) > 0 {
		// Past the commit point: readers decode these units until they
		// are rebuilt or applied.
		if err := f.markDirty(ctx, fmt.Errorf("staged write not applied: %w", errors.Join(applyErrs...)), d.MarkDirty...); err != nil {
			return err
		}
	}
	if d.AbortBroken {
		eachComp(d.MarkDirty, func(_, c int) error {
			_, err := f.snapCall(ctx, s, osdproto.OpAbort, c, osdproto.Req{Txid: txid}, nil)
			return err
		})
	}
	if d.Close {
		_ = f.c.mds(ctx, mdsproto.OpIntentDone, mdsproto.IntentReq{Ino: s.ino, Txid: txid}, nil)
	}
	// Otherwise the stages stay: the resolver applies them once their
	// OSDs answer.
	return nil
}

// outcomes classifies unit results for the staged-write decisions: at
// staging (stage), a refused capability means the layout moved.
func outcomes(rs []unitResult, stage bool) []stagedwrite.Unit {
	out := make([]stagedwrite.Unit, len(rs))
	for i, r := range rs {
		o := stagedwrite.Unreachable
		switch {
		case r.err == nil:
			o = stagedwrite.Done
		case stage && (errors.Is(r.err, wire.ErrStale) || errors.Is(r.err, wire.ErrDenied)):
			o = stagedwrite.Moved
		case osdproto.UnitBroken(r.err):
			o = stagedwrite.Broken
		}
		out[i] = stagedwrite.Unit{Comp: r.comp, Out: o}
	}
	return out
}

// applyStage applies component c's stage of a committed intent. A
// capability refused past the commit point expired meanwhile (the layout
// cannot have moved: repairs wait for a file's intents), so it is renewed
// and the apply sent again; it is never taken for a unit that failed,
// which would mark a component dirty that holds its data. It returns the
// boot of the OSD that applied it (0 if another did: unknown).
func (f *File) applyStage(ctx context.Context, s fileSnap, c int, txid uint64) (uint64, error) {
	for try := 0; ; try++ {
		// Applied already (by the resolver, or a copy of this request)
		// answers done: the OSD keeps a tombstone (osd/stage.go). Not
		// found means it never had the stage, and is an error.
		wr, err := osdproto.WriteReplyOf(f.snapCall(ctx, s, osdproto.OpApply, c, osdproto.Req{Txid: txid, Flags: f.mustExist(c)}, nil))
		if err == nil {
			f.checkCreated(ctx, c, wr.Created) // the object was lost: the stage alone is not its data
			return wr.Boot, nil
		}
		if !errors.Is(err, wire.ErrDenied) || try == maxCapRenewals {
			return 0, err
		}
		if rerr := f.refresh(ctx, s.cap); rerr != nil {
			return 0, err
		}
		ns := f.snap()
		if ns.lay.Version != s.lay.Version {
			return 0, err
		}
		s = ns
	}
}

func toU32s(xs []int) []uint32 {
	out := make([]uint32, len(xs))
	for i, x := range xs {
		out[i] = uint32(x)
	}
	return out
}
