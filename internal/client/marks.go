package client

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Dirty marks: a component that missed a write, or was found lost, is
// recorded dirty here and at the MDS, and read around until a healer
// rewrites it (or this handle's own missed writes land, for the marks it
// alone made). See docs/braid.md, "Vouching for reads".

// takeMarksLocked merges the MDS's dirty marks (under amu). A mark this
// handle alone made for writes it has caught up since is its to clear at
// the next commit: the component is current. Any other mark is read
// around, and is no longer this handle's to clear: another writer's
// unit write to the component may have failed after this one's landed.
func (f *File) takeMarksLocked(dirty, own []uint32) {
	for _, d := range dirty {
		c := int(d)
		if slices.Contains(own, d) {
			if !f.caughtUp[c] { // the MDS hears at the commit
				f.dirty[c] = true
			}
			continue
		}
		f.dirty[c] = true
		delete(f.caughtUp, c)
		delete(f.missed, c)
	}
}

// markDirty records that components missed a write (why says how), here
// and at the MDS, before the write counts as done: no repair may then use
// them as a source and no reader trusts them.
func (f *File) markDirty(ctx context.Context, why error, all ...int) error {
	_, err := f.reportDirty(ctx, mdsproto.MarkDirtyReq{Why: errText(why)}, all)
	if err != nil {
		f.setErr(err)
	}
	return err
}

// markMissed is markDirty for a unit write to comp that failed: if comp
// was clean, the write is kept (with the stripe it belongs to) and sent
// again when the OSDs are next flushed, and the mark is this handle's to
// clear once it lands.
// It reports whether the write was kept.
func (f *File) markMissed(ctx context.Context, why error, comp int, off int64, data []byte) bool {
	f.amu.Lock()
	kept := !f.dirty[comp] || f.missed[comp]
	if kept {
		f.missed[comp] = true
		f.keepWriteLocked(comp, off, data, 0, false) // 0: no OSD process took it
	}
	f.amu.Unlock()
	req := mdsproto.MarkDirtyReq{Why: errText(why)}
	if kept {
		req.Handle = f.handle
	}
	if _, err := f.reportDirty(ctx, req, []int{comp}); err != nil {
		f.setErr(err)
	}
	return kept
}

// markLost records that a reader found component comp's object lost
// (objectLen bytes long; -1: unusable) under layout version: the MDS takes
// the mark only if the file is still at that version and still records
// more than the object holds (a reader's view may predate a truncation).
// It reports whether the MDS refused the mark because its record no
// longer asks for those bytes (another handle cut the file since this one
// learned its extents): the handle then has the record's extents, and the
// read is worth vouching for again.
func (f *File) markLost(ctx context.Context, version uint64, why error, comp int, objectLen int64) bool {
	req := mdsproto.MarkDirtyReq{Version: version, Why: errText(why), Lost: true, ObjectLen: objectLen}
	in, err := f.reportDirty(ctx, req, []int{comp})
	if err != nil || in.Ino == 0 || slices.Contains(in.Dirty, uint32(comp)) {
		return false
	}
	f.amu.Lock()
	delete(f.dirty, comp) // refused: a newer layout, or the record no longer asks for those bytes
	f.amu.Unlock()
	f.lmu.Lock()
	defer f.lmu.Unlock()
	if in.Layout == nil || in.Layout.Version != f.lay.Version || slices.Equal(in.Extents, f.ext) {
		return false
	}
	f.ext, f.extGen = slices.Clone(in.Extents), in.SizeGen
	return true
}

// sortedComps lists the components set in m, sorted.
func sortedComps(m map[int]bool) []uint32 {
	var out []uint32
	for c, ok := range m {
		if ok {
			out = append(out, uint32(c))
		}
	}
	slices.Sort(out)
	return out
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// reportDirty records comps dirty here and at the MDS and returns the
// inode as the MDS has it after the mark (zero when nothing was sent).
func (f *File) reportDirty(ctx context.Context, req mdsproto.MarkDirtyReq, all []int) (mdsproto.Inode, error) {
	var comps []int
	f.amu.Lock()
	for _, c := range all {
		if req.Handle == 0 {
			delete(f.missed, c) // dirty for another reason: not this handle's to clear
			delete(f.caughtUp, c)
		}
		if f.dirty[c] && f.own[c] && f.reporting[c] == 0 {
			continue // this handle's mark is at the MDS already
		}
		// A component dirty by another's mark is marked again, as this
		// handle's: the other may be a writer that clears its own mark
		// once its failed writes landed, which would leave this one's
		// write missing from a component trusted again.
		comps = append(comps, c)
		f.dirty[c] = true
		f.own[c] = true
		f.reporting[c]++
	}
	f.amu.Unlock()
	if len(comps) == 0 {
		return mdsproto.Inode{}, nil
	}
	defer func() {
		f.amu.Lock()
		for _, c := range comps {
			if f.reporting[c]--; f.reporting[c] <= 0 {
				delete(f.reporting, c)
			}
		}
		f.amu.Unlock()
	}()
	req.Ino = f.layoutIno()
	req.Writer = f.handle
	for _, c := range comps {
		req.Comps = append(req.Comps, uint32(c))
	}
	var in mdsproto.Inode
	err := f.c.mds(ctx, mdsproto.OpMarkDirty, req, &in) // retried through MDS restarts
	if errors.Is(err, wire.ErrDenied) && req.Writer != 0 && f.write {
		// An MDS that restarted (or took over) since the handle's last
		// renewal does not know it writes yet: renewing tells it, and the
		// mark goes again.
		if rerr := f.c.mds(ctx, mdsproto.OpRenew, mdsproto.RenewReq{Ino: req.Ino, Handle: req.Writer}, nil); rerr == nil {
			err = f.c.mds(ctx, mdsproto.OpMarkDirty, req, &in)
		}
	}
	if err != nil {
		return in, fmt.Errorf("%s: record components %v as dirty: %w", f.path, comps, err)
	}
	return in, nil
}

func (f *File) isDirty(comp int) bool {
	f.amu.Lock()
	defer f.amu.Unlock()
	return f.dirty[comp]
}
