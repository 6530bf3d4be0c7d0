package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// A unit write is durable only once its OSD has synced it. Until then a
// power cut of the OSD may drop it, and the OSD that comes back answers
// as if nothing happened. So a writing handle keeps every unit write its
// OSDs took but have not synced, with the OSD process (boot) that took
// it, as NFSv3 clients keep unstable writes with the server's write
// verifier: a sync, or a read, that answers from another boot means the
// OSD restarted, and the kept writes are sent again before the sync
// counts. Nothing acknowledged is lost to an OSD restart, and no
// component is marked dirty for one.
//
// Memory is bounded by Options.MaxUnsyncedBytes per handle: past it the
// handle syncs its OSDs (not the MDS) and drops what it kept.

// maxReplays bounds how often one sync sends kept writes again to an OSD
// that keeps restarting; past it the components are marked dirty.
const maxReplays = 3

// ErrOSDRestarted: an OSD answering is not the process that took writes
// it had not made durable; a power cut in between may have dropped them.
var ErrOSDRestarted = errors.New("the OSD restarted after taking writes it had not made durable")

// unitWrite is one unit write an OSD took but has not synced.
type unitWrite struct {
	comp   int
	off    int64
	data   []byte // into a kept stripe buffer
	boot   uint64 // the OSD process that took it
	synced bool   // sent with osdproto.FlagSync: durable when answered
}

// unsyncedWrites is what a handle keeps between syncs (guarded by amu).
type unsyncedWrites struct {
	writes []*unitWrite  // oldest first: sent again in this order
	bytes  int64         // of the kept stripe buffers
	bufs   []*stripeBuf  // kept stripe buffers, back to the pool at the sync
	boots  map[int]int64 // component written since the last sync → boot of its writes, -1 if several
}

func newUnsynced() unsyncedWrites {
	return unsyncedWrites{boots: map[int]int64{}}
}

// dropUnsynced forgets the unit writes f's OSDs took unsynced since its
// last sync, giving their stripe buffers back, and returns what it
// forgot (its buffers no longer to be read).
func (f *File) dropUnsynced() unsyncedWrites {
	f.amu.Lock()
	u := f.unsynced
	f.unsynced = newUnsynced()
	f.amu.Unlock()
	for _, wb := range u.bufs {
		wire.PutBuf(wb.buf)
	}
	return u
}

// keepWrite records a unit write comp's OSD took from process boot
// (synced: made durable before it answered).
func (f *File) keepWrite(comp int, off int64, data []byte, boot uint64, synced bool) {
	f.amu.Lock()
	defer f.amu.Unlock()
	f.keepWriteLocked(comp, off, data, boot, synced)
}

func (f *File) keepWriteLocked(comp int, off int64, data []byte, boot uint64, synced bool) {
	u := &f.unsynced
	u.writes = append(u.writes, &unitWrite{comp: comp, off: off, data: data, boot: boot, synced: synced})
	if b, ok := u.boots[comp]; !ok {
		u.boots[comp] = int64(boot)
	} else if b != int64(boot) {
		u.boots[comp] = -1
	}
}

// keepStripe keeps a sent stripe's buffer until the sync (its units are
// kept writes). Its in-flight reservation is returned now: the buffer
// counts against MaxUnsyncedBytes instead.
func (f *File) keepStripe(wb *stripeBuf) {
	f.inflight.Release(int64(len(wb.buf)))
	f.amu.Lock()
	defer f.amu.Unlock()
	f.unsynced.bufs = append(f.unsynced.bufs, wb)
	f.unsynced.bytes += int64(len(wb.buf))
}

// maxUnsyncedBytes is Options.MaxUnsyncedBytes, or its default if unset.
func (f *File) maxUnsyncedBytes() int64 {
	if n := f.c.opts.MaxUnsyncedBytes; n > 0 {
		return n
	}
	return DefaultOptions.MaxUnsyncedBytes
}

func (f *File) unsyncedBytes() int64 {
	f.amu.Lock()
	defer f.amu.Unlock()
	return f.unsynced.bytes
}

// staleBoot reports whether comp took writes since the last sync from an
// OSD process other than boot, the one answering now.
func (f *File) staleBoot(comp int, boot uint64) bool {
	f.amu.Lock()
	defer f.amu.Unlock()
	b, ok := f.unsynced.boots[comp]
	return ok && b != int64(boot)
}

// nothingUnsynced reports whether no unit write is in flight or kept
// unsynced, and none waits to be sent again: the unit writes of a flush
// starting now may then be sent synced, and the sync after it needs no
// request (allSynced). The caller holds mu.
func (f *File) nothingUnsynced() bool {
	f.pending.mu.Lock()
	idle := f.pending.total == 0
	f.pending.mu.Unlock()
	f.amu.Lock()
	defer f.amu.Unlock()
	return idle && len(f.unsynced.writes) == 0 && len(f.missed) == 0
}

// allSynced reports whether every write in u was sent synced, and so is
// durable on its OSD already.
func (u *unsyncedWrites) allSynced() bool {
	for _, w := range u.writes {
		if !w.synced {
			return false
		}
	}
	return true
}

// flushOSDs makes every unit write since the last sync durable on its
// OSD, sending kept writes again to OSDs that restarted meanwhile. A
// component that cannot be made durable is marked dirty. The caller
// holds mu (no write can start meanwhile).
func (f *File) flushOSDs(ctx context.Context) {
	f.pending.wait()
	f.replayWanted.Store(false)
	lay := f.layout()
	f.amu.Lock()
	u := f.unsynced
	f.unsynced = newUnsynced()
	skip := u.allSynced() && len(f.missed) == 0
	f.amu.Unlock()
	defer func() {
		for _, wb := range u.bufs {
			wire.PutBuf(wb.buf)
		}
	}()
	type osdWrites struct {
		comps  []uint32
		writes []*unitWrite // in their original order
	}
	if skip {
		return // each write was durable when its OSD answered
	}
	byOSD := map[uint32]*osdWrites{}
	for comp := range u.boots {
		if comp < len(lay.OSDs) {
			g := byOSD[lay.OSDs[comp]]
			if g == nil {
				g = &osdWrites{}
				byOSD[lay.OSDs[comp]] = g
			}
			g.comps = append(g.comps, uint32(comp))
		}
	}
	for _, w := range u.writes {
		if w.comp < len(lay.OSDs) {
			g := byOSD[lay.OSDs[w.comp]]
			g.writes = append(g.writes, w)
		}
	}
	var wg sync.WaitGroup
	for _, g := range byOSD {
		slices.Sort(g.comps)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.syncOSD(ctx, g.comps, g.writes)
		}()
	}
	wg.Wait()
	// Missed writes not sent again by now are dropped with the rest: those
	// components stay dirty, for a repair to rebuild.
	f.amu.Lock()
	clear(f.missed)
	f.amu.Unlock()
}

// replayMayHelp reports whether sending this handle's kept writes again
// may let a read that failed succeed: an OSD restarted since it took
// some (replayWanted), or some failed and wait to be sent again (missed):
// once they land, their components are current again and read, where
// waiting for the next flush left a stripe short of units if another
// component failed meanwhile.
func (f *File) replayMayHelp() bool {
	if f.replayWanted.Load() {
		return true
	}
	f.amu.Lock()
	defer f.amu.Unlock()
	return len(f.missed) > 0
}

// resendable reports whether comp's kept writes are sent again: it is not
// dirty, or dirty only for this handle's own failed writes (missed).
func (f *File) resendable(comp int) bool {
	f.amu.Lock()
	defer f.amu.Unlock()
	return !f.dirty[comp] || f.missed[comp]
}

// catchUp records that comps' writes since the last flush are all durable
// on their OSD: those dirty only for this handle's missed writes are
// current again, and the next commit asks the MDS to clear their marks.
func (f *File) catchUp(comps []uint32) {
	f.amu.Lock()
	defer f.amu.Unlock()
	for _, c := range comps {
		if f.missed[int(c)] {
			delete(f.missed, int(c))
			delete(f.dirty, int(c))
			delete(f.own, int(c))
			f.caughtUp[int(c)] = true
		}
	}
}

// syncOSD syncs comps on their OSD. If the OSD answers from another
// process than the one that took some of writes, those are sent again and
// the sync repeated.
func (f *File) syncOSD(ctx context.Context, comps []uint32, writes []*unitWrite) {
	for attempt := 0; ; attempt++ {
		boot, err := osdproto.BootOf(f.unitCall(ctx, osdproto.OpSync, int(comps[0]), osdproto.Req{Comps: comps}, nil, nil))
		if err != nil {
			_ = f.markDirty(ctx, fmt.Errorf("sync failed: %w", err), ints(comps)...)
			return
		}
		stale := staleWrites(writes, boot, f.resendable)
		if len(stale) == 0 {
			f.catchUp(comps)
			return
		}
		if attempt == maxReplays {
			var lost []int
			for _, w := range stale {
				if !slices.Contains(lost, w.comp) {
					lost = append(lost, w.comp)
				}
			}
			_ = f.markDirty(ctx, fmt.Errorf("sync: %w (sent again %d times)", ErrOSDRestarted, attempt), lost...)
			return
		}
		for _, w := range stale {
			if !f.resendable(w.comp) {
				continue // a component marked meanwhile is rebuilt whole
			}
			req := osdproto.Req{Off: w.off, Flags: f.mustExist(w.comp)}
			wr, err := osdproto.WriteReplyOf(f.unitCall(ctx, osdproto.OpWrite, w.comp, req, w.data, nil))
			if err != nil {
				_ = f.markDirty(ctx, fmt.Errorf("sending an unsynced write again: %w", err), w.comp)
				continue
			}
			f.checkCreated(ctx, w.comp, wr.Created)
			w.boot = wr.Boot
		}
	}
}

// staleWrites are the writes to send again to an OSD now answering from
// boot: for each component resendable, its first write that boot did not
// take (or that failed: boot 0) and every later one (a later write the
// new boot took may overlap an earlier lost one, and must land after it
// again).
func staleWrites(writes []*unitWrite, boot uint64, resendable func(int) bool) []*unitWrite {
	from := map[int]bool{}
	var out []*unitWrite
	for _, w := range writes {
		if !from[w.comp] && w.boot != boot && resendable(w.comp) {
			from[w.comp] = true
		}
		if from[w.comp] {
			out = append(out, w)
		}
	}
	return out
}

// errRecreated: a write found no object where the file's record says one
// holds written data, and created it anew, with holes below the write.
var errRecreated = errors.New("its object was gone: a write created it anew")

// mustExist is the flag a Write, Truncate or Apply of comp carries when
// the file's record says its object holds written data: the OSD then
// refuses (ErrLost, and the component is marked dirty) rather than create
// it anew with holes below the write. Unlike the reply's created flag
// (checkCreated), the refusal survives a lost reply: the request, sent
// again on a new connection, is refused again.
func (f *File) mustExist(comp int) uint8 {
	if f.extentOf(comp) > 0 {
		return osdproto.FlagMustExist
	}
	return 0
}

// checkCreated marks comp dirty if a write that created its object found
// the object missing although the MDS records written data in it: the
// lost bytes read as holes, so the component must be rebuilt, not read.
func (f *File) checkCreated(ctx context.Context, comp int, created bool) {
	if created && f.extentOf(comp) > 0 {
		_ = f.markDirty(ctx, fmt.Errorf("unit write: %w", errRecreated), comp)
	}
}

func ints(xs []uint32) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}
