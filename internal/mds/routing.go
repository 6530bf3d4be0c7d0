package mds

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// router is this process's place among the MDS processes: whether it
// leads, which slots it serves by the routing table (internal/core/route),
// the table's planning when it leads, and the OSD map and key ring the
// leader shares with the others (multi.go).
type router struct {
	kv      kv.Engine
	cfg     *Config
	cluster *clusterMap
	keys    *keyRing     // adopted from the leader's sealed ring
	fkeys   *fileKeys    // opens that ring
	locks   *extentLocks // slots gained or lost move their locks
	repairs *repairQueue // which processes are active, for their workers' assignments
	addr    func() string

	routes routes // the routing table this process serves by
	// gainedAt is when this process last took over slots (multi.go), in
	// unix nanoseconds; osdMap what it last published of the OSD map.
	gainedAt    atomic.Int64
	osdMap      osdMapState
	adoptedRing atomic.Pointer[[]byte] // the sealed key ring last adopted (multi.go)
}

// routeRefresh is how often an MDS process reads the table again, and
// the leader plans it again.
const routeRefresh = 500 * time.Millisecond

// routeView is the table a process serves by, with the epoch value that
// fences its changes and when the read that found it was sent.
type routeView struct {
	table  *route.Table
	epoch  []byte
	readAt time.Time
}

// routes holds the current view.
type routes struct{ view atomic.Pointer[routeView] }

func (r *routes) load() *routeView { return r.view.Load() }

// selfRoute is this process as the table names it.
func (rt *router) selfRoute() route.Server {
	return route.Server{Name: rt.cfg.Name, Addr: rt.addr()}
}

// aliveRoutes are the processes the table is to name: this one, or with
// several active processes, those the engine lists.
func (rt *router) aliveRoutes(ctx context.Context) ([]route.Server, error) {
	if !rt.multi() || rt.cfg.Actives == nil {
		return []route.Server{rt.selfRoute()}, nil
	}
	asked := rt.cfg.Now() // before the answer: a process gone from it left before now
	actives, err := rt.cfg.Actives(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(actives))
	out := make([]route.Server, 0, len(actives))
	for _, a := range actives {
		names = append(names, a.Name)
		if a.Name == rt.cfg.Name {
			a.Addr = rt.addr()
		}
		if a.Name != "" && a.Addr != "" { // one not listening yet gets slots once it is
			out = append(out, route.Server{Name: a.Name, Addr: a.Addr})
		}
	}
	rt.repairs.noteActives(names, asked)
	return out, nil
}

// readRoutes reads the table and its epoch in r (nil table: none yet).
func readRoutes(r kv.Reader) (*route.Table, []byte, error) {
	var t route.Table
	ok, err := getRecord(r, keyRoute, &t)
	if err != nil || !ok {
		return nil, nil, err
	}
	if err := t.Check(); err != nil {
		return nil, nil, wire.Errorf(wire.ErrInternal, "%v", err)
	}
	epoch, err := r.Get(keyRouteEpoch)
	if err != nil {
		return nil, nil, err
	}
	if len(epoch) != 8 || binary.BigEndian.Uint64(epoch) != t.Epoch {
		return nil, nil, wire.Errorf(wire.ErrInternal, "routing table of epoch %d, its epoch key %x", t.Epoch, epoch)
	}
	return &t, epoch, nil
}

// planAndStoreRoutes makes the table name the processes alive, if it
// does not already: the leader's part. It returns the table as stored.
func (rt *router) planAndStoreRoutes(ctx context.Context) (*routeView, error) {
	alive, err := rt.aliveRoutes(ctx)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	var view routeView
	err = rt.kv.Update(kv.AsLeader(ctx), func(tx kv.Txn) error {
		old, epoch, err := readRoutes(tx)
		if errors.Is(err, wire.ErrInternal) {
			// Undecodable (a flipped bit in the store): planned afresh,
			// in an epoch past any counted up from 1 that processes may
			// have served by (a number, never read as a time).
			rt.cfg.Log.Error("routing table unreadable; planning a new one", "err", err)
			next, _ := route.Plan(nil, alive)
			if next == nil {
				return wire.Errorf(wire.ErrUnavail, "no MDS process to route to")
			}
			next.Epoch = uint64(time.Now().UnixNano())
			view = routeView{table: next, epoch: binary.BigEndian.AppendUint64(nil, next.Epoch), readAt: sent}
			if err := putRecord(tx, keyRoute, next); err != nil {
				return err
			}
			return tx.Put(keyRouteEpoch, view.epoch)
		}
		if err != nil {
			return err
		}
		next, changed := route.Plan(old, alive)
		if next == nil {
			return wire.Errorf(wire.ErrUnavail, "no MDS process to route to")
		}
		view = routeView{table: next, epoch: epoch, readAt: sent}
		if !changed {
			return nil
		}
		view.epoch = binary.BigEndian.AppendUint64(nil, next.Epoch)
		if err := putRecord(tx, keyRoute, next); err != nil {
			return err
		}
		return tx.Put(keyRouteEpoch, view.epoch)
	})
	if err != nil {
		return nil, err
	}
	rt.serveRoutes(&view)
	return &view, nil
}

// startRoutes sets the table up at the start: the only active process
// plans it; one of several adopts the leader's (which names it once it
// is listed, within a refresh or two), and serves no file until then.
func (rt *router) startRoutes(ctx context.Context) error {
	if !rt.multi() {
		_, err := rt.planAndStoreRoutes(ctx)
		return err
	}
	if err := rt.adoptShared(ctx); err != nil {
		rt.cfg.Log.Info("no routing table to serve by yet", "err", err)
	}
	return nil
}

// serveRoutes makes v the table this process serves by, and starts the
// waits for slots it gained (multi.go).
func (rt *router) serveRoutes(v *routeView) {
	var old *routeView
	for {
		old = rt.routes.view.Load()
		if old != nil && old.table.Epoch > v.table.Epoch {
			return // a slower read of an older table: never served by again
		}
		if old != nil && old.table.Epoch == v.table.Epoch && !v.readAt.After(old.readAt) {
			return
		}
		if rt.routes.view.CompareAndSwap(old, v) {
			break
		}
	}
	if old != nil && old.table.Epoch == v.table.Epoch {
		return
	}
	var was *route.Table
	if old != nil {
		was = old.table
	}
	gained, lost := route.Changes(was, v.table, rt.cfg.Name)
	gained = route.GraceAfterSkips(was, v.table, rt.cfg.Name, gained)
	rt.cfg.Log.Info("routing table", "epoch", v.table.Epoch, "servers", len(v.table.Servers), "slots_here", v.table.SlotsOf()[rt.cfg.Name], "gained", len(gained), "lost", len(lost))
	if rt.multi() && len(gained) > 0 {
		rt.gained(rt.cfg.Now(), gained)
	}
	if rt.multi() && len(lost) > 0 {
		gone := map[uint32]bool{}
		for _, slot := range lost {
			gone[slot] = true
		}
		rt.locks.table.dropInos(rt.cfg.Now(), func(ino uint64) bool { return gone[route.SlotOf(ino)] })
	}
}

// routeLoop keeps the table current while the process serves: the
// leader plans it (and publishes the OSD map); with several active
// processes the others adopt what it keeps.
func (rt *router) routeLoop(ctx context.Context) {
	t := time.NewTicker(routeRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !rt.leading() {
			rt.repairs.forgetActives() // a lead taken again starts from a fresh look
		}
		if !rt.serving() || !rt.multi() {
			continue // one active process planned its table at its start
		}
		var err error
		switch {
		case rt.leading():
			rt.cluster.takeLead(rt.cfg.Now())
			if _, err = rt.planAndStoreRoutes(ctx); err == nil && rt.multi() {
				err = rt.publishOSDMap(ctx)
			}
		case rt.multi():
			err = rt.adoptShared(ctx)
		}
		if err != nil && ctx.Err() == nil {
			rt.cfg.Log.Warn("routing table, OSD map or key ring not current", "err", err)
		}
	}
}

// fenceByRoutes makes the changes a request makes commit only under the
// table it was served by, where the engine is shared with other MDS
// processes (on one process's own store nobody else changes it).
func (rt *router) fenceByRoutes(ctx context.Context) context.Context {
	if rt.cfg.LeadUntil == nil {
		return ctx
	}
	if v := rt.routes.load(); v != nil {
		return kv.WithExpect(ctx, keyRouteEpoch, v.epoch)
	}
	return ctx
}

// routing is the table as clients and status see it.
func (rt *router) routing() *mdsproto.Routing {
	v := rt.routes.load()
	if v == nil {
		return nil
	}
	t := v.table
	out := &mdsproto.Routing{Multi: rt.multi(), Epoch: t.Epoch, Owners: t.Owners}
	counts := t.SlotsOf()
	for _, srv := range t.Servers {
		out.Servers = append(out.Servers, mdsproto.RouteServer{Name: srv.Name, Addr: srv.Addr, Slots: counts[srv.Name]})
	}
	return out
}
