package client

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Routing among several active MDS processes (internal/mdsproto's
// route.go): the client keeps the routing table, sends a request about
// one file's state to the owner of the file's slot, and asks for the
// table again when a process answers ErrMoved (the slot moved) or an
// owner cannot be reached (it died, and the leader will move its slots).
// A request that names its file by path goes first to the process of
// the inode a hint says the path leads to, or to any, and on ErrMoved the
// client looks the path up and keeps the answer as the hint: the path is
// what the MDS acts on, the hint only where the client asks.

// clientRoutes is the table as the client routes by it.
type clientRoutes struct {
	epoch uint64
	addrs [1 << mdsproto.SlotBits]string // the owner of each slot
}

type routeState struct {
	table atomic.Pointer[clientRoutes] // nil, or one naming a single process: no routing

	refreshMu   sync.Mutex
	refreshedAt time.Time

	hintMu sync.Mutex
	hints  map[string]uint64 // path key → the inode it led to
}

const (
	maxRouteHints     = 4096                   // paths remembered (all forgotten when full)
	minRouteRefreshed = 100 * time.Millisecond // a burst of ErrMoved answers asks once
)

// routeCtxKey pins a request to one MDS address (a lock session's).
type routeCtxKey struct{}

// toMDS makes requests sent with ctx go to addr.
func toMDS(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, routeCtxKey{}, addr)
}

// ownerOf is the address of the process serving ino's slot ("" : no
// routing; whichever MDS serves).
func (c *Client) ownerOf(ino uint64) string {
	t := c.routes.table.Load()
	if t == nil || ino == 0 {
		return ""
	}
	return t.addrs[mdsproto.SlotOf(ino)]
}

// pinned reports whether ctx sends its requests to one MDS address.
func pinned(ctx context.Context) bool {
	_, ok := ctx.Value(routeCtxKey{}).(string)
	return ok
}

// routeAddr is where req goes ("" : to whichever MDS serves).
func (c *Client) routeAddr(ctx context.Context, req any) string {
	if addr, ok := ctx.Value(routeCtxKey{}).(string); ok {
		return addr
	}
	if c.routes.table.Load() == nil {
		return ""
	}
	if r, ok := req.(mdsproto.RoutedByIno); ok {
		if ino := r.RouteIno(); ino != 0 {
			return c.ownerOf(ino)
		}
	}
	if r, ok := req.(mdsproto.RoutedByPath); ok {
		if key, _, _, ok := pathHintKey(r); ok {
			c.routes.hintMu.Lock()
			ino := c.routes.hints[key]
			c.routes.hintMu.Unlock()
			return c.ownerOf(ino)
		}
	}
	return ""
}

// pathHintKey names the inode a path request routes by, and says how to
// look it up.
func pathHintKey(r mdsproto.RoutedByPath) (key, target string, dir uint64, ok bool) {
	p, dir, parent, ok := r.RoutePath()
	if !ok {
		return "", "", 0, false
	}
	target = p
	if parent {
		target = path.Dir(path.Clean("/" + p))
		if dir != 0 {
			target = path.Dir(path.Clean(p))
		}
	}
	return fmt.Sprintf("%d:%s", dir, target), target, dir, true
}

// refreshRoutes asks the MDS processes in turn for the routing table,
// each for at most routeAskTimeout, unless another request did just now.
func (c *Client) refreshRoutes(ctx context.Context) { c.refreshRoutesFrom(ctx, "") }

// refreshRoutesFrom is refreshRoutes asking first (prefer non-empty)
// the process at prefer: one that just acted on a table newer than the
// client's.
func (c *Client) refreshRoutesFrom(ctx context.Context, prefer string) {
	c.routes.refreshMu.Lock()
	defer c.routes.refreshMu.Unlock()
	if prefer == "" && time.Since(c.routes.refreshedAt) < minRouteRefreshed {
		return
	}
	c.routes.refreshedAt = time.Now()
	body, err := mdsproto.Marshal(struct{}{})
	if err != nil {
		return
	}
	if prefer != "" && c.askRoutes(ctx, prefer, body) {
		return
	}
	start := int(c.mdsPick.Load())
	for i := range c.mdsAddrs {
		k := (start + i) % len(c.mdsAddrs)
		if c.askRoutes(ctx, c.mdsAddrs[k], body) {
			c.mdsPick.Store(int32(k))
			return
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// routeAskTimeout bounds asking one MDS process for the table: one that
// is paused or gone must not hold up the next.
const routeAskTimeout = 3 * time.Second

// askRoutes asks addr for the table and keeps it, reporting whether it
// answered with one.
func (c *Client) askRoutes(ctx context.Context, addr string, body []byte) bool {
	ctx, cancel := context.WithTimeout(ctx, routeAskTimeout)
	defer cancel()
	conn, err := c.mdsPool.Get(ctx, addr)
	if err != nil || conn.Welcome().Role != wire.RoleMDS {
		return false
	}
	meta, _, err := conn.Call(ctx, mdsproto.OpRoute, body, nil, nil)
	if err != nil {
		return false // not serving, an older MDS without the op, or no table yet
	}
	var rt mdsproto.Routing
	if mdsproto.Unmarshal(meta, &rt) != nil || len(rt.Owners) != 1<<mdsproto.SlotBits || len(rt.Servers) == 0 {
		return false
	}
	if !rt.Multi {
		c.routes.table.Store(nil) // one process serves all: the address list's failover does
		return true
	}
	next := &clientRoutes{epoch: rt.Epoch}
	for slot, o := range rt.Owners {
		if int(o) >= len(rt.Servers) {
			return false
		}
		next.addrs[slot] = rt.Servers[o].Addr
	}
	for {
		cur := c.routes.table.Load()
		if cur != nil && cur.epoch > next.epoch {
			return true // an older table than the one held
		}
		if c.routes.table.CompareAndSwap(cur, next) {
			return true
		}
	}
}

// rerouted handles an answer that says the request went to the wrong
// process (ErrMoved), or to an owner that no longer serves or answers:
// it asks for the table again and, for a request by path, looks the path
// up. It reports whether to send the request again.
func (c *Client) rerouted(ctx context.Context, err error, routedTo string, req any) bool {
	moved := errors.Is(err, wire.ErrMoved)
	if !moved && (routedTo == "" || !errors.Is(err, wire.ErrNotLeader) && !IsConnError(err)) {
		return false
	}
	c.refreshRoutes(ctx)
	if pinned(ctx) {
		return false // a pinned request is its sender's to redirect (the table is new now)
	}
	if r, ok := req.(mdsproto.RoutedByPath); ok && moved {
		if key, target, dir, ok := pathHintKey(r); ok {
			var st mdsproto.StatResp
			if c.mds(ctx, mdsproto.OpStat, mdsproto.PathReq{Path: target, Dir: dir}, &st) == nil {
				c.routes.hintMu.Lock()
				if c.routes.hints == nil || len(c.routes.hints) >= maxRouteHints {
					c.routes.hints = map[string]uint64{}
				}
				c.routes.hints[key] = st.Inode.Ino
				c.routes.hintMu.Unlock()
			}
		}
	}
	return true
}
