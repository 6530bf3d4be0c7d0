package mds

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Several active MDS processes (Config.ServeUntil; kv.Etcd.Join), as
// Slice's directory servers. Each serves while it holds its own session,
// and every request that acts on a file's in-memory state (its handles'
// leases, its extent locks, its writers' marks and commits, its staged
// writes) only for the files of the slots the routing table gives it:
// others are answered ErrMoved. Namespace operations that need none of
// that state (lookups, listings, mkdir, renames, removes) any process
// serves, the engine's transactions keeping them atomic. One process, the
// one holding the lead, also does what is the cluster's alone: it takes
// the OSDs' heartbeats and publishes the OSD map (keyOSDMap) the others
// adopt, plans the routing table, rotates capability keys (the others
// adopt the ring), and deletes, resolves, repairs, scrubs and balances.
//
// What a process does not know about a slot it gains (the previous
// owner's leases and extent locks, in its memory) it waits out, as a
// restarted MDS does: new extent locks in the slots it gained only after
// a lock lease (clients reclaim theirs meanwhile; gained), and no orphan
// reaped for a writer lease. A process that removes another slot's
// file's last name keeps the file as an orphan, for its owner, which knows whether it is
// open, to reap. Metadata caching grants nothing yet here: a grant would
// need its recall by whichever process changes the inode (the cover
// protocol, still to come), so clients look up every time.

// multi reports whether several MDS processes may be active.
func (rt *router) multi() bool { return rt.cfg.ServeUntil != nil }

// serving reports whether this process may answer requests now.
func (rt *router) serving() bool {
	if rt.multi() {
		return time.Now().Before(rt.cfg.ServeUntil())
	}
	return rt.leading()
}

// leaderOps are what only the leader serves when several are active:
// they rest on its memory (the OSDs' heartbeats, the repair queues,
// status of both) or change what is the cluster's (OSDs, keys).
var leaderOps = map[uint16]bool{
	mdsproto.OpHeartbeat: true, mdsproto.OpOSDDrain: true, mdsproto.OpOSDRemove: true,
	mdsproto.OpRecover: true, mdsproto.OpKeyRotate: true, mdsproto.OpRepairAssign: true,
	mdsproto.OpRepairDone: true, mdsproto.OpScrub: true, mdsproto.OpStatus: true,
}

// admit refuses op here if only the leader serves it and this process
// does not lead, and otherwise marks the leader's commits as such.
func (rt *router) admit(ctx context.Context, op uint16) (context.Context, error) {
	if !rt.multi() || !leaderOps[op] {
		return ctx, nil
	}
	if !rt.leading() {
		return ctx, wire.Errorf(wire.ErrNotLeader, "this MDS does not lead the metadata service: ask another")
	}
	return kv.AsLeader(ctx), nil
}

// routeStale is how old the routing table a process serves files by may
// be: past it (etcd unreachable) it serves none, as the table may have
// moved their slots.
const routeStale = 3 * time.Second

// owns reports whether this process serves ino's slot now.
func (rt *router) owns(ino uint64) bool {
	if !rt.multi() {
		return true
	}
	v := rt.freshRoutes()
	return v != nil && v.table.Owner(route.SlotOf(ino)).Name == rt.cfg.Name
}

// freshRoutes is the table this process serves by, if read within
// routeStale (nil: none, or too old to act by).
func (rt *router) freshRoutes() *routeView {
	v := rt.routes.load()
	if v == nil || time.Since(v.readAt) >= routeStale {
		return nil
	}
	return v
}

// needOwner is nil if this process serves ino's file state, else the
// ErrMoved that sends the client to the table.
func (rt *router) needOwner(ino uint64) error {
	if rt.owns(ino) {
		return nil
	}
	if v := rt.routes.load(); v != nil {
		o := v.table.Owner(route.SlotOf(ino))
		return wire.Errorf(wire.ErrMoved, "inode %d (slot %d) is served by %s at %s (routing table epoch %d)", ino, route.SlotOf(ino), o.Name, o.Addr, v.table.Epoch)
	}
	return wire.Errorf(wire.ErrMoved, "no routing table here yet")
}

// grantServer is this process as clients route to it, with several
// active ("" : the one MDS).
func (rt *router) grantServer() string {
	if !rt.multi() {
		return ""
	}
	return rt.selfRoute().Addr
}

// gained starts the waits for slots this process took over (see above);
// the files of the slots it kept go on at once. Each gained slot waits a
// lock lease and the clock margin (its previous owner's clients may still
// write under its locks), and the staleness of the table that owner may
// have gone on renewing them by: the reclaims of its clients, who find
// the slot's new owner only by a table of their own, fit in that window.
func (rt *router) gained(now time.Time, slots []uint32) {
	rt.locks.table.graceSlots(now, slots, rt.cfg.TakeoverGrace+routeStale)
	rt.gainedAt.Store(now.UnixNano())
}

// inGainGrace reports whether leases of slots gained lately may still be
// unknown here: a writer lease, plus the time the old owner may have
// gone on renewing them by a table not yet read again.
func (rt *router) inGainGrace(now time.Time) bool {
	at := rt.gainedAt.Load()
	return at != 0 && now.Sub(time.Unix(0, at)) < rt.cfg.WriterLease+routeStale
}

// keyScrubWanted holds a file a process that does not lead wants
// scrubbed (its writer died): 'q' + ino, no value. The leader queues and
// deletes them.

// wantScrub has the leader scrub inos: at once if this process leads,
// else through the engine.
func (q *repairQueue) wantScrub(ctx context.Context, inos []uint64) error {
	if !q.route.multi() || q.route.leading() {
		q.queueScrub(inos)
		return nil
	}
	return q.kv.Update(ctx, func(tx kv.Txn) error {
		for _, ino := range inos {
			if err := tx.Put(scrubWantedKey(ino), nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// takeWantedScrubs queues what others asked the leader to scrub.
func (q *repairQueue) takeWantedScrubs(ctx context.Context) error {
	var inos []uint64
	err := q.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(firstKey(pScrubWanted), pastKeys(pScrubWanted), func(k, _ []byte) bool {
			if ino, ok := inoOfKey(k); ok {
				inos = append(inos, ino)
			}
			return len(inos) < resolveBatch
		})
	})
	if err != nil || len(inos) == 0 {
		return err
	}
	q.queueScrub(inos)
	return q.kv.Update(kv.AsLeader(ctx), func(tx kv.Txn) error {
		for _, ino := range inos {
			if err := tx.Delete(scrubWantedKey(ino)); err != nil {
				return err
			}
		}
		return nil
	})
}

// The OSD map others adopt: keyOSDMap, a record the leader writes when an
// OSD's identity or state changes, and every osdMapEvery besides (free
// space, and to show they are alive: a process counts silence from a
// publication's first read only, so it must come well inside the down
// timeout). An OSD's liveness travels as how long
// it had been silent when the leader wrote, never as a time of the
// leader's clock: a process adopting it counts that silence back from
// when it sent its read.

const osdMapEvery = 2 * time.Second

// osdMapPeriod is how often the leader republishes an unchanged map: a
// quarter of the down timeout, within osdMapEvery and routeRefresh.
func (rt *router) osdMapPeriod() time.Duration {
	return max(min(osdMapEvery, rt.cfg.OSDDownAfter/4), routeRefresh)
}

type osdMapRec struct {
	V int `json:"v"` // 1
	// Seq numbers publications: a process counts an OSD's silence back
	// from its first read of a publication only, so reading the same one
	// again does not make the OSD look heard from later.
	Seq  uint64   `json:"seq"`
	OSDs []osdPub `json:"osds"`
}

type osdPub struct {
	osdRec
	Heard    bool  `json:"heard"`     // the leader has heard from it
	SilentNs int64 `json:"silent_ns"` // since, when the leader wrote
	Capacity int64 `json:"capacity"`
	Used     int64 `json:"used"`
	Free     int64 `json:"free"`
	Pid      int   `json:"pid"`
	// The OSD's disk (mdsproto.HeartbeatReq.Disk): "" before it said.
	Disk      string `json:"disk,omitempty"`
	DiskBytes int64  `json:"disk_bytes,omitempty"`
	DiskFree  int64  `json:"disk_free,omitempty"`
	// Its failure domains (mdsproto.HeartbeatReq.Host, Rack).
	Host string `json:"host,omitempty"`
	Rack string `json:"rack,omitempty"`
}

// osdMapState is what the leader last published, and the publication
// this process last adopted (its Seq + 1; 0: none).
type osdMapState struct {
	last    atomic.Pointer[osdMapRec]
	lastAt  atomic.Int64
	adopted atomic.Uint64
}

// adoptNew reports whether publication seq is newer than any adopted,
// and if so records it: reads racing each other never adopt an older
// one, nor one twice.
func (m *osdMapState) adoptNew(seq uint64) bool {
	for {
		cur := m.adopted.Load()
		if seq+1 <= cur {
			return false
		}
		if m.adopted.CompareAndSwap(cur, seq+1) {
			return true
		}
	}
}

// publishOSDMap writes the OSD map if it changed, or osdMapEvery passed.
func (rt *router) publishOSDMap(ctx context.Context) error {
	now := rt.cfg.Now()
	// Judging by its own heartbeats from now on, before it says how long
	// each OSD has been silent (the first publication after taking the
	// lead may come from a registration, before routeLoop's turn).
	rt.cluster.takeLead(now)
	rec := &osdMapRec{V: 1, OSDs: rt.cluster.publish(now)}
	if last := rt.osdMap.last.Load(); last != nil && sameOSDMap(last, rec) && now.Sub(time.Unix(0, rt.osdMap.lastAt.Load())) < rt.osdMapPeriod() {
		return nil
	}
	err := rt.kv.Update(kv.AsLeader(ctx), func(tx kv.Txn) error {
		var prev osdMapRec
		if _, err := getRecord(tx, keyOSDMap, &prev); err != nil && !errors.Is(err, wire.ErrInternal) {
			return err // an undecodable map is replaced
		}
		rec.Seq = prev.Seq + 1
		return putRecord(tx, keyOSDMap, rec)
	})
	if err != nil {
		return err
	}
	rt.osdMap.last.Store(rec)
	rt.osdMap.lastAt.Store(now.UnixNano())
	return nil
}

// sameOSDMap compares maps but for silences and space.
func sameOSDMap(a, b *osdMapRec) bool {
	if len(a.OSDs) != len(b.OSDs) {
		return false
	}
	for i := range a.OSDs {
		x, y := a.OSDs[i], b.OSDs[i]
		if x.osdRec != y.osdRec || x.Heard != y.Heard {
			return false
		}
	}
	return true
}

// adoptShared reads what the leader keeps for all (the routing table,
// the OSD map and the capability key ring) and serves by it.
func (rt *router) adoptShared(ctx context.Context) error {
	sent := time.Now()
	var (
		table       *route.Table
		epoch       []byte
		osdMap      osdMapRec
		haveMap     bool
		sealedRing  []byte
		errNoRoutes = errors.New("no routing table in the engine yet")
	)
	err := rt.kv.View(ctx, func(r kv.Reader) error {
		var err error
		if table, epoch, err = readRoutes(r); err != nil {
			return err
		}
		if table == nil {
			return errNoRoutes
		}
		if haveMap, err = getRecord(r, keyOSDMap, &osdMap); err != nil {
			return err
		}
		sealedRing, err = r.Get(keyCapRing)
		return err
	})
	if err != nil {
		return err
	}
	rt.serveRoutes(&routeView{table: table, epoch: epoch, readAt: sent})
	if haveMap && rt.osdMap.adoptNew(osdMap.Seq) {
		rt.cluster.adopt(osdMap.OSDs, sent)
	}
	if sealedRing == nil {
		return nil
	}
	if last := rt.adoptedRing.Load(); last != nil && bytes.Equal(*last, sealedRing) {
		return nil // as adopted already: no unsealing every refresh
	}
	b, err := rt.fkeys.openRing(sealedRing)
	if err != nil {
		return err
	}
	if err := rt.keys.adopt(b); err != nil {
		return err
	}
	rt.adoptedRing.Store(&sealedRing)
	return nil
}
