package coresim

import (
	"fmt"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/core/cache"
	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/extlock"
	"github.com/braidfs/braid/internal/core/gc"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/layout"
)

// restart is a new MDS process: its tables start empty and in grace
// (the store's marks said locks and caches may be held); clients take
// their locks back in the grace, or lose them.
func (e *env) restart() {
	e.lockIncarn++
	e.locks = extlock.New(e.cfg.Lease, e.now, route.SlotOf)
	e.locks.Grace(e.now, 0)
	e.incarn++
	e.cache = cache.New(e.cfg.Lease, e.incarn)
	e.cache.Grace(e.now, 0)
	e.changes = nil // in flight at the crash: never committed
	for _, dir := range sortedKeys(e.claims) {
		e.cache.LoadClaim(e.now, dir, e.claims[dir].holder, e.claims[dir].id)
	}
	e.note("restart: incarnation %d", e.incarn)
	for _, c := range e.lockC {
		if e.rng.IntN(2) == 0 {
			e.lockReclaimOf(c)
		}
	}
}

// routeServers are the processes alive, as the table names them.
func (e *env) routeServers() []route.Server {
	var out []route.Server
	for _, n := range e.mds {
		out = append(out, route.Server{Name: n, Addr: n + ":1"})
	}
	return out
}

// mdsChurn: a process joins or leaves; the leader plans the table.
func (e *env) mdsChurn(join bool) {
	if join && len(e.mds) < 5 {
		e.mds = append(e.mds, fmt.Sprintf("m%d", e.rng.IntN(9)))
		slices.Sort(e.mds)
		e.mds = slices.Compact(e.mds)
	} else if !join && len(e.mds) > 1 {
		i := e.rng.IntN(len(e.mds))
		gone := e.mds[i]
		e.mds = slices.Delete(e.mds, i, i+1)
		for _, ino := range sortedKeys(e.repairing) {
			if h := e.repairing[ino]; h.process == gone && e.now.After(h.at) {
				h.dead = true
				e.repairing[ino] = h
			}
		}
	}
	next, changed := route.Plan(e.table, e.routeServers())
	if changed {
		for slot := range uint32(route.SlotCount) {
			if !slices.Contains(e.mds, next.Owner(slot).Name) {
				e.fail("slot %d routed to %s, which is not alive (%v)", slot, next.Owner(slot).Name, e.mds)
				return
			}
		}
	}
	e.table = next
	e.note("routes: epoch %d over %v", next.Epoch, e.mds)
	names := slices.Clone(e.mds)
	for _, ino := range e.book.NoteActives(names, e.now) {
		e.note("scrub of %d queued again", ino)
	}
}

// workerAssignment is an assignment as the model of its repair worker knows it.
type workerAssignment struct {
	repair.Assignment
	at      time.Time
	process string
	dead    bool // its process left: the leader may hand the file to another
}

// simFile is a file as the repair model knows it.
type simFile struct {
	l     layout.Layout
	dirty []uint32
}

// placeFiles places the repair model's files.
func (e *env) placeFiles() {
	specs := []string{"ec:2+1", "ec:4+2", "mirror:3"}
	for i := range e.cfg.Files {
		spec, _ := layout.Parse(specs[i%len(specs)])
		l, err := placement.Place(spec, -1, e.candidates(), e.rng)
		if err != nil {
			continue // too few OSDs for this layout
		}
		e.files[e.ino(i)] = &simFile{l: l}
	}
}

// views is every known OSD's state now.
func (e *env) views() map[uint32]cluster.View {
	out := map[uint32]cluster.View{}
	for _, id := range sortedKeys(e.seen) {
		if !e.removed[id] {
			out[id] = cluster.View{State: e.live.State(e.seen[id], e.now)}
		}
	}
	return out
}

// candidates are the OSDs placement may use: up.
func (e *env) candidates() []placement.Candidate {
	var out []placement.Candidate
	for _, id := range sortedKeys(e.seen) {
		if !e.removed[id] && e.live.Up(e.seen[id], e.now) {
			out = append(out, placement.Candidate{ID: id, FreeBytes: 1 << 30})
		}
	}
	return out
}

func (e *env) heartbeat() {
	for _, id := range sortedKeys(e.seen) {
		if !e.failed[id] && !e.removed[id] {
			e.seen[id] = e.now
		}
	}
}

// osdFail stops an OSD's heartbeats, or starts a failed one's again.
func (e *env) osdFail() {
	id := uint32(e.rng.IntN(e.cfg.OSDs)) + 1
	e.failed[id] = !e.failed[id]
	e.note("osd %d failed=%v", id, e.failed[id])
}

// osdRemove removes a failed OSD from the cluster, or adds a new one.
func (e *env) osdRemove() {
	if e.rng.IntN(2) == 0 && len(e.seen) < 2*e.cfg.OSDs {
		id := uint32(len(e.seen)) + 1
		e.seen[id] = e.now
		e.note("osd %d added", id)
		return
	}
	for _, id := range sortedKeys(e.failed) {
		if e.failed[id] && !e.removed[id] {
			e.removed[id] = true
			e.note("osd %d removed", id)
			return
		}
	}
}

// dirty marks a component of a file dirty (a writer missed it).
func (e *env) dirty() {
	inos := sortedKeys(e.files)
	if len(inos) == 0 {
		return
	}
	f := e.files[inos[e.rng.IntN(len(inos))]]
	c := uint32(e.rng.IntN(len(f.l.OSDs)))
	if !slices.Contains(f.dirty, c) {
		f.dirty = append(f.dirty, c)
	}
}

// repairAssign: a worker asks for work; the leader picks a file it may
// assign and decides the assignment.
func (e *env) repairAssign() {
	kind := repair.KindRebuild
	if e.rng.IntN(4) == 0 {
		kind = repair.KindScrub
	}
	views := e.views()
	cands := e.candidates()
	for _, ino := range sortedKeys(e.files) {
		if !e.book.Assignable(ino, e.now) {
			continue
		}
		f := e.files[ino]
		c, ok, err := repair.DecideAssignment(f.l, f.dirty, views, kind, nil, placement.NewPool(cands), e.rng)
		if err != nil || !ok {
			continue
		}
		if h, busy := e.repairing[ino]; busy && !h.dead && e.now.Sub(h.at) < repair.Lease {
			e.fail("inode %d assigned while a live worker holds it (assigned at +%v by %s)", ino, h.at.Sub(e.start), h.process)
			return
		}
		for i, id := range c.OSDs {
			if id != f.l.OSDs[i] && !slices.ContainsFunc(cands, func(x placement.Candidate) bool { return x.ID == id }) {
				e.fail("inode %d component %d placed on OSD %d, which placement may not use", ino, i, id)
			}
		}
		process := e.mds[e.rng.IntN(len(e.mds))]
		e.book.Record(ino, repair.Assigned{At: e.now, Version: f.l.Version + 1, Kind: c.Kind, Process: process})
		e.repairing[ino] = workerAssignment{Assignment: c, at: e.now, process: process}
		if len(c.GCComps) > 0 {
			rec := e.gcRecs[ino]
			if rec == nil {
				rec = &gc.Record{}
				e.gcRecs[ino] = rec
			}
			gc.Merge(rec, 1, c.GCComps, c.GCOSDs, 0, e.now.Add(e.cfg.Lease).UnixNano())
		}
		f.l.OSDs, f.l.Version = c.OSDs, f.l.Version+1
		e.note("assignment %d: %s comps %v osds %v", ino, c.Kind, c.Comps, c.OSDs)
		return
	}
}

// repairDone: a worker reports; what it wrote is clean again.
func (e *env) repairDone() {
	inos := sortedKeys(e.repairing)
	if len(inos) == 0 {
		return
	}
	ino := inos[e.rng.IntN(len(inos))]
	c := e.repairing[ino]
	delete(e.repairing, ino)
	f := e.files[ino]
	if e.rng.IntN(5) == 0 {
		e.book.Backoff(ino, e.now.Add(repair.Lease/100))
		e.note("repair of %d failed", ino)
	} else {
		f.dirty = slices.DeleteFunc(f.dirty, func(x uint32) bool { return slices.Contains(c.Comps, x) })
		e.note("repair of %d done", ino)
	}
	e.book.Done(ino, f.l.Version)
}

// gcPass deletes what is due, with some OSDs not answering.
func (e *env) gcPass() {
	for _, ino := range sortedKeys(e.gcRecs) {
		rec := e.gcRecs[ino]
		_, busy := e.repairing[ino]
		if !gc.Due(e.now.UnixNano(), rec.NotBeforeNs, busy) {
			continue
		}
		osds, byOSD := gc.ByOSD(rec)
		deleted := map[gc.Pair]bool{}
		for _, id := range osds {
			if e.failed[id] {
				continue
			}
			for _, comp := range byOSD[id] {
				p := gc.Pair{Comp: comp, OSD: id}
				deleted[p] = true
				e.gcSeen[p] = e.now.UnixNano()
			}
		}
		if e.now.UnixNano() < rec.NotBeforeNs && len(deleted) > 0 {
			e.fail("inode %d objects deleted before their delay", ino)
		}
		next, gone := gc.Shrink(*rec, deleted)
		if gone {
			delete(e.gcRecs, ino)
		} else {
			*rec = next
		}
		e.note("gc %d: %d deleted, gone=%v", ino, len(deleted), gone)
	}
}
