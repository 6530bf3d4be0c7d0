package mds

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Keys of the routing table (route.go): the table, a record, and its
// epoch alone (8 bytes, big-endian), which every change fenced by the
// table compares (kv.WithExpect) without reading the whole table.
var (
	keyRoute      = []byte("s/route")
	keyRouteEpoch = []byte("s/route-epoch")
)

// routeRefresh is how often an MDS process reads the table again, and
// the leader plans it again.
const routeRefresh = 500 * time.Millisecond

// routeView is the table a process serves by, with the epoch value that
// fences its changes and when the read that found it was sent.
type routeView struct {
	table  *routeTable
	epoch  []byte
	readAt time.Time
}

// routes holds the current view.
type routes struct{ view atomic.Pointer[routeView] }

func (r *routes) load() *routeView { return r.view.Load() }

// selfRoute is this process as the table names it.
func (s *Server) selfRoute() routeServer {
	return routeServer{Name: s.cfg.Name, Addr: s.Addr()}
}

// aliveRoutes are the processes the table is to name: this one. (With
// several active processes, the leader's list of the processes alive.)
func (s *Server) aliveRoutes() []routeServer { return []routeServer{s.selfRoute()} }

// readRoutes reads the table and its epoch in r (nil table: none yet).
func readRoutes(r kv.Reader) (*routeTable, []byte, error) {
	var t routeTable
	ok, err := getRecord(r, keyRoute, &t)
	if err != nil || !ok {
		return nil, nil, err
	}
	if err := t.check(); err != nil {
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
func (s *Server) planAndStoreRoutes(ctx context.Context) (*routeView, error) {
	sent := time.Now()
	var view routeView
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		old, epoch, err := readRoutes(tx)
		if err != nil {
			return err
		}
		next, changed := planRoutes(old, s.aliveRoutes())
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
	if old := s.routes.load(); old == nil || old.table.Epoch != view.table.Epoch {
		s.cfg.Log.Info("routing table", "epoch", view.table.Epoch, "servers", len(view.table.Servers), "slots_here", view.table.slotsOf()[s.cfg.Name])
	}
	s.routes.view.Store(&view)
	return &view, nil
}

// routeLoop keeps the table current while the process serves.
func (s *Server) routeLoop(ctx context.Context) {
	t := time.NewTicker(routeRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.leading() {
			continue
		}
		if _, err := s.planAndStoreRoutes(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("routing table not planned", "err", err)
		}
	}
}

// fenceByRoutes makes the changes a request makes commit only under the
// table it was served by, where the engine is shared with other MDS
// processes (on one process's own store nobody else changes it).
func (s *Server) fenceByRoutes(ctx context.Context) context.Context {
	if s.cfg.LeadUntil == nil {
		return ctx
	}
	if v := s.routes.load(); v != nil {
		return kv.WithExpect(ctx, keyRouteEpoch, v.epoch)
	}
	return ctx
}

// routing is the table as clients and status see it.
func (s *Server) routing() *mdsproto.Routing {
	v := s.routes.load()
	if v == nil {
		return nil
	}
	t := v.table
	out := &mdsproto.Routing{Epoch: t.Epoch, Owners: t.Owners}
	counts := t.slotsOf()
	for _, srv := range t.Servers {
		out.Servers = append(out.Servers, mdsproto.RouteServer{Name: srv.Name, Addr: srv.Addr, Slots: counts[srv.Name]})
	}
	return out
}
