package mds

// Dirty marks: components that missed writes or were found lost, who
// made each mark, and when a writer may clear its own.

import (
	"context"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// markDirty records components that missed a write.
func (q *repairQueue) markDirty(ctx context.Context, req mdsproto.MarkDirtyReq) (mdsproto.Inode, error) {
	if requireRole(ctx, rRepair, "") != nil {
		// Others mark only as a writer of the file, for writes of their
		// own that missed; what a reader finds is verified by a scrub
		// first, so no one can make a file unreadable by saying so.
		if err := q.route.needOwner(req.Ino); err != nil {
			return mdsproto.Inode{}, err // the writer's lease is there
		}
		if req.Lost || !q.leases.writes(req.Ino, req.Writer, q.cfg.Now()) {
			if err := q.wantScrub(ctx, []uint64{req.Ino}); err != nil {
				return mdsproto.Inode{}, err
			}
			return mdsproto.Inode{}, wire.Errorf(wire.ErrDenied, "only a writer of inode %d marks its components dirty; a scrub of it is queued", req.Ino)
		}
	}
	stale := false
	var lost mdsproto.FileEvent // set when the marks leave the file lost
	now := q.cfg.Now()
	in, err := q.shell.updateInode(ctx, req.Ino, func(tx kv.Txn, rec *inodeRec) error {
		if rec.Layout == nil {
			return wire.Errorf(wire.ErrIsDir, "inode %d", req.Ino)
		}
		if req.Version != 0 && req.Version != rec.Layout.Version {
			stale = true
			return nil
		}
		if req.Lost && !stillLost(rec, req.Comps, req.ObjectLen) {
			stale = true
			return nil
		}
		if q.sights.repairActive(rec.Ino, rec.Repair, q.cfg.Now()) {
			for _, c := range req.Comps {
				if slices.Contains(rec.Repair.Comps, c) {
					rec.Repair.Tainted = true
				}
			}
		}
		var err error
		if req.Handle != 0 && !req.Lost {
			err = addWriterDirty(rec, req.Comps, req.Handle)
		} else {
			err = addDirty(rec, req.Comps)
		}
		if err != nil {
			return err
		}
		if !req.Lost {
			return nil // a writer's missed writes: caught up, or rebuilt
		}
		lost, err = q.noteIfLost(tx, rec, now)
		return err
	})
	if err == nil && !stale {
		q.cfg.Log.Info("components marked dirty", "ino", req.Ino, "comps", req.Comps, "why", req.Why, "writer", req.Handle != 0)
	}
	if err == nil && !stale && lost.What != "" {
		q.cfg.Log.Warn("file lost", "ino", req.Ino, "path", lost.Path, "why", lost.Why)
		q.mu.Lock()
		q.noteFileEventLocked(lost)
		q.mu.Unlock()
	}
	return in, err
}

// stillLost reports whether an object of objectLen bytes (-1: unusable)
// is short of what rec records its group's objects hold.
func stillLost(rec *inodeRec, comps []uint32, objectLen int64) bool {
	if objectLen < 0 {
		return true
	}
	w := len(rec.Layout.OSDs) / max(1, rec.Layout.Groups)
	for _, c := range comps {
		if g := int(c) / max(1, w); g < len(rec.Extents) && objectLen < rec.Extents[g] {
			return true
		}
	}
	return false
}

func addDirty(rec *inodeRec, comps []uint32) error {
	for _, c := range comps {
		delete(rec.DirtyBy, c) // marked by someone else: no writer may clear it
	}
	return addMarks(rec, comps)
}

// addWriterDirty is addDirty for marks writer handle made for its own unit
// writes that failed: a component dirty for no other reason records the
// handle, whose commit may clear the mark once it sent them again.
func addWriterDirty(rec *inodeRec, comps []uint32, handle uint64) error {
	pruneDirtyBy(rec)
	var owned []uint32
	for _, c := range comps {
		if by, ok := rec.DirtyBy[c]; !slices.Contains(rec.Dirty, c) || (ok && by == handle) {
			owned = append(owned, c)
		}
	}
	if err := addDirty(rec, comps); err != nil {
		return err
	}
	for _, c := range owned {
		if rec.DirtyBy == nil {
			rec.DirtyBy = map[uint32]uint64{}
		}
		rec.DirtyBy[c] = handle
	}
	return nil
}

// clearCaughtUp clears the marks of comps that handle alone made and has
// since caught up (sent its failed writes again, synced), unless a repair
// of them runs (it clears them when done). It returns those it cleared.
func clearCaughtUp(rec *inodeRec, comps []uint32, handle uint64, repairing bool) []uint32 {
	var cleared []uint32
	for _, c := range comps {
		by, ok := rec.DirtyBy[c]
		if !ok || by != handle || handle == 0 || !slices.Contains(rec.Dirty, c) ||
			(repairing && slices.Contains(rec.Repair.Comps, c)) {
			continue
		}
		rec.Dirty = slices.DeleteFunc(rec.Dirty, func(d uint32) bool { return d == c })
		delete(rec.DirtyBy, c)
		cleared = append(cleared, c)
	}
	if len(rec.Dirty) == 0 {
		rec.Dirty = nil
	}
	pruneDirtyBy(rec)
	return cleared
}

// ownDirty lists the marks handle alone made.
func ownDirty(rec *inodeRec, handle uint64) []uint32 {
	var out []uint32
	for _, c := range rec.Dirty {
		if by, ok := rec.DirtyBy[c]; ok && by == handle && handle != 0 {
			out = append(out, c)
		}
	}
	return out
}

// pruneDirtyBy drops the entries of components no longer dirty.
func pruneDirtyBy(rec *inodeRec) {
	for c := range rec.DirtyBy {
		if !slices.Contains(rec.Dirty, c) {
			delete(rec.DirtyBy, c)
		}
	}
	if len(rec.DirtyBy) == 0 {
		rec.DirtyBy = nil
	}
}

func addMarks(rec *inodeRec, comps []uint32) error {
	if len(comps) > len(rec.Layout.OSDs) {
		return wire.Errorf(wire.ErrInvalid, "%d dirty components for a layout of %d", len(comps), len(rec.Layout.OSDs))
	}
	for _, c := range comps {
		if int(c) >= len(rec.Layout.OSDs) {
			return wire.Errorf(wire.ErrInvalid, "component %d out of range", c)
		}
		if !slices.Contains(rec.Dirty, c) {
			rec.Dirty = append(rec.Dirty, c)
		}
	}
	slices.Sort(rec.Dirty)
	return nil
}

// noteIfLost records rec as lost (damage.go) when its dirty components
// (objects found gone) leave some parity group unable to decode whatever
// OSDs return, and no repair is moving its components.
// It returns the event to report, if so.
func (q *repairQueue) noteIfLost(tx kv.Txn, rec *inodeRec, now time.Time) (mdsproto.FileEvent, error) {
	if rec.Layout == nil || q.sights.repairActive(rec.Ino, rec.Repair, now) {
		return mdsproto.FileEvent{}, nil
	}
	spec, err := specOf(rec.Layout.Spec)
	if err != nil {
		return mdsproto.FileEvent{}, nil
	}
	p := repair.Plan(rec.Layout.OSDs, rec.Dirty, q.cluster.views(now), spec)
	if !p.Lost {
		return mdsproto.FileEvent{}, nil
	}
	e := mdsproto.FileEvent{Ino: rec.Ino, Path: pathOf(tx, rec), What: mdsproto.FileLost, Why: p.LostWhy, AtNs: now.UnixNano()}
	return e, noteLost(tx, rec.Ino, p.LostWhy, now.UnixNano())
}
