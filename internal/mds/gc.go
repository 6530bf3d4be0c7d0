package mds

import (
	"context"
	"errors"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/core/gc"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// GC of removed objects: the shell of internal/core/gc. A removed file,
// a replaced layout, a moved component or a failed write leaves a record
// (g<ino><version>) naming the objects to delete and when; the leader's
// pass deletes them from their OSDs once due and shrinks each record as
// OSDs confirm, so an OSD that is down when a file is removed is cleaned
// when it returns.

// collector deletes removed objects from their OSDs.
type collector struct {
	kv      kv.Engine
	keys    *keyRing   // capabilities for the deletions
	sights  *sights    // when a stamped deadline passes here
	osds    *osdClient // the deletions themselves
	now     func() time.Time
	delay   time.Duration // Config.DeleteDelay: how long removed objects outlive their files
	leading func() bool   // whether this process is the leader, whose duty GC is
}

// add queues components' objects on the OSDs they left for deletion,
// merging with a record already at that key.
func (g *collector) add(tx kv.Txn, ino, ver uint64, comps, osds []uint32, bytes int64) error {
	var rec gcRec
	if _, err := getRecord(tx, gcKey(ino, ver), &rec); err != nil {
		return err
	}
	gc.Merge(&rec, recFormat, comps, osds, bytes, g.now().Add(g.delay).UnixNano())
	return putRecord(tx, gcKey(ino, ver), &rec)
}

// queueDelete records l's objects for deletion once every capability that
// could still reach them has expired.
// It merges with what a repair at the same version queued (the objects
// its moved components left behind).
func (g *collector) queueDelete(tx kv.Txn, rec *inodeRec) error {
	l := rec.Layout
	var comps, osds []uint32
	for c, id := range l.OSDs {
		comps, osds = append(comps, uint32(c)), append(osds, id)
	}
	return g.add(tx, rec.Ino, l.Version, comps, osds, layoutBytes(rec, comps))
}

type gcItem struct {
	key []byte
	ino uint64
	ver uint64
	rec gcRec
}

// pass handles up to gcBatch records from cursor on and returns where
// the next pass starts, so records that cannot finish (an OSD long down)
// never stop the ones behind them.
func (g *collector) pass(ctx context.Context, cursor []byte) ([]byte, error) {
	if cursor == nil {
		cursor = firstKey(pGC)
	}
	var items []gcItem
	err := g.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(cursor, pastKeys(pGC), func(k, v []byte) bool {
			var it gcItem
			var ok bool
			if it.ino, it.ver, ok = pairOfKey(k); ok && decodeRecord(v, &it.rec) == nil && it.rec.Valid() {
				it.key = append([]byte(nil), k...)
				items = append(items, it)
			}
			return len(items) < gcBatch
		})
	})
	if err != nil || len(items) < gcBatch {
		cursor = nil // wrap around
	} else {
		cursor = append(items[len(items)-1].key, 0)
	}
	if err != nil {
		return cursor, err
	}
	now := g.now()
	type progress struct {
		key     []byte
		deleted map[gc.Pair]bool
	}
	var done []progress
	for _, it := range items {
		if !g.leading() {
			break // a successor deletes them, on its own clock
		}
		deadline := g.sights.deadline(sightDelete, it.key, it.rec.NotBeforeNs, g.delay)
		if !gc.Due(now.UnixNano(), deadline, now.UnixNano() >= deadline && g.repairing(ctx, it.ino, now)) {
			continue
		}
		if deleted := g.deleteObjects(ctx, it); len(deleted) > 0 {
			done = append(done, progress{it.key, deleted})
		}
	}
	if len(done) == 0 {
		return cursor, nil
	}
	// One commit for the pass, not one a file. Each record is read again:
	// a repair or removal may have added to it since (addGC merges), and
	// only what was confirmed deleted leaves it.
	return cursor, g.kv.Update(ctx, func(tx kv.Txn) error {
		for _, d := range done {
			var rec gcRec
			found, err := getRecord(tx, d.key, &rec)
			if err != nil {
				return err
			}
			if !found {
				continue
			}
			if next, gone := gc.Shrink(rec, d.deleted); gone {
				err = tx.Delete(d.key)
			} else {
				err = putRecord(tx, d.key, &next)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// repairing reports whether ino is locked by a repair: the objects a
// move left behind are its copy sources until it finishes (deleted under
// it, they once read as zeros and were copied as data).
func (g *collector) repairing(ctx context.Context, ino uint64, now time.Time) bool {
	busy := false
	_ = g.kv.View(ctx, func(r kv.Reader) error {
		rec, err := getInode(r, ino)
		busy = err == nil && g.sights.repairActive(ino, rec.Repair, now)
		return nil
	})
	return busy
}

// deleteObjects asks each OSD of the record to drop its components and
// returns those it confirmed.
func (g *collector) deleteObjects(ctx context.Context, it gcItem) map[gc.Pair]bool {
	osds, byOSD := gc.ByOSD(&it.rec)
	now := g.now()
	c := g.keys.ring.Issue(it.ino, capability.Write, it.ver, now.Add(time.Minute))
	deleted := map[gc.Pair]bool{}
	for _, id := range osds {
		comps := byOSD[id]
		if g.deleteOn(ctx, id, osdproto.Req{Cap: c, Ino: it.ino, Comps: comps}, now) {
			for _, comp := range comps {
				deleted[gc.Pair{Comp: comp, OSD: id}] = true
			}
		}
	}
	return deleted
}

func (g *collector) deleteOn(ctx context.Context, id uint32, req osdproto.Req, now time.Time) bool {
	err := g.osds.call(ctx, id, osdproto.OpDelete, req, now)
	// Stale: a newer layout of the file owns that object now; not ours to delete.
	return err == nil || errors.Is(err, wire.ErrStale)
}
