package fusefs

// Who a mount's requests act as. The mount's credential may act as anyone
// (its kernel checks every caller with default_permissions); each request
// names the calling process's uid, gid and supplementary groups, so that
// the MDS checks the same permissions again and a file system operation
// never does at the MDS what its caller could not. FUSE carries the uid,
// gid and pid; the supplementary groups are read from /proc/PID/status
// and kept for callerTTL per process (at most maxCachedCallers processes).
// Root's requests name no one: the MDS would let root through anyway.

import (
	"context"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
)

const (
	callerTTL        = time.Second
	maxCachedCallers = 4096
)

type callerCache struct {
	mu sync.Mutex
	m  map[uint32]cachedCaller // by pid
}

type cachedCaller struct {
	who braid.Caller
	at  time.Time
}

// opCtx is the context of one FUSE operation's calls: not interrupted by
// the kernel (see uninterrupted) and acting as its caller.
func (m *mount) opCtx(ctx context.Context) context.Context {
	out := uninterrupted(ctx)
	fc, ok := fuse.FromContext(ctx)
	if !ok || fc.Uid == 0 {
		return out
	}
	return braid.WithCaller(out, m.callers.of(ctx, fc, time.Now()))
}

// groupsOf is the calling process's group and supplementary groups (from
// the cache), for the decisions the mount makes itself.
func (m *mount) groupsOf(ctx context.Context) []uint32 {
	fc, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	who := m.callers.of(ctx, fc, time.Now())
	return append([]uint32{who.Gid}, who.Groups...)
}

// of is the identity of the process fc names, from the cache while it is
// fresh and the process still has the uid and gid it had.
func (c *callerCache) of(ctx context.Context, fc *fuse.Caller, now time.Time) braid.Caller {
	c.mu.Lock()
	e, ok := c.m[fc.Pid]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < callerTTL && e.who.Uid == fc.Uid && e.who.Gid == fc.Gid {
		return e.who
	}
	groups := callerGroups(ctx)[1:] // the first is fc.Gid
	if len(groups) > mdsproto.MaxCallerGroups {
		groups = groups[:mdsproto.MaxCallerGroups]
	}
	who := braid.Caller{Uid: fc.Uid, Gid: fc.Gid, Groups: groups}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedCallers {
		c.m = make(map[uint32]cachedCaller)
	}
	c.m[fc.Pid] = cachedCaller{who: who, at: now}
	c.mu.Unlock()
	return who
}
