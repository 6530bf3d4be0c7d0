package mds

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// keyCacheHeld marks that clients may cache under grants of this store's
// MDS: a process that finds it at start waits one lease (cache.go). It is
// set before the first grant after it was cleared, and cleared once no
// session has cached for a lease.
var keyCacheHeld = []byte("s/cache_held")

const (
	maxInvalidateRounds  = 8         // invalidate-and-retry rounds one change may take
	maxInvalidationBytes = 512 << 10 // invalidations one CacheWait answer carries, encoded (about)
)

// errMustInvalidate rolls back a transaction whose changes some caching
// session has not been told of yet.
var errMustInvalidate = errors.New("mds: cached inodes to invalidate first")

// coherentEngine is the MDS's engine: every update learns which inodes
// and directory entries its transaction writes, and commits only once
// every session caching them has been told (cache.go). Reads pass
// through.
type coherentEngine struct {
	kv.Engine
	t   *cacheTable
	now func() time.Time
}

// Update runs fn; a transaction that writes cached inodes is rolled back,
// their holders invalidated, and run again (at most maxInvalidateRounds).
func (e *coherentEngine) Update(ctx context.Context, fn func(kv.Txn) error) error {
	var c *change
	defer func() {
		if c != nil {
			e.t.end(c)
		}
	}()
	for round := 0; ; round++ {
		var mustWait, inGrace bool
		err := e.Engine.Update(ctx, func(tx kv.Txn) error {
			mustWait, inGrace = false, false
			rt := &touchTxn{Txn: tx}
			if err := fn(rt); err != nil {
				return err
			}
			if len(rt.touched) == 0 {
				return nil
			}
			if c == nil {
				c = newChange()
			}
			mustWait, inGrace = e.t.cover(e.now(), c, rt.touched)
			if inGrace || mustWait {
				return errMustInvalidate
			}
			return nil
		})
		if !errors.Is(err, errMustInvalidate) {
			return err
		}
		if round == maxInvalidateRounds {
			return wire.Errorf(wire.ErrBusy, "cached metadata changed under %d rounds of invalidation", round)
		}
		if inGrace {
			if err := e.sleepUntil(ctx, e.t.graceEnd()); err != nil {
				return err
			}
			continue
		}
		if err := e.awaitAcks(ctx, c); err != nil {
			return err
		}
	}
}

// awaitAcks waits until every session c invalidated has acknowledged, or
// has been evicted (after cacheRecallWait) and its lease has run out.
func (e *coherentEngine) awaitAcks(ctx context.Context, c *change) error {
	deadline := e.now().Add(cacheRecallWait)
	for {
		now := e.now()
		acks, leaseEnd, waiting := e.t.pending(now, c)
		if !waiting {
			return nil
		}
		if acks == nil {
			if err := e.sleepUntil(ctx, leaseEnd); err != nil {
				return err
			}
			continue
		}
		left := deadline.Sub(now)
		if left <= 0 {
			e.t.evictLaggards(c)
			continue
		}
		t := time.NewTimer(left)
		select {
		case <-acks:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}

func (e *coherentEngine) sleepUntil(ctx context.Context, until time.Time) error {
	d := until.Sub(e.now())
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// touchTxn notes the inodes whose attributes ('i' keys) or entries
// ('d' keys) a transaction writes.
type touchTxn struct {
	kv.Txn
	touched map[uint64]bool
}

func (t *touchTxn) Put(key, value []byte) error { t.note(key); return t.Txn.Put(key, value) }
func (t *touchTxn) Delete(key []byte) error     { t.note(key); return t.Txn.Delete(key) }

func (t *touchTxn) note(key []byte) {
	if len(key) < 9 || (key[0] != 'i' && key[0] != 'd') || (key[0] == 'i' && len(key) != 9) {
		return
	}
	if t.touched == nil {
		t.touched = map[uint64]bool{}
	}
	t.touched[beUint64(key[1:9])] = true
}

// startCache sets up the table, in grace if the store says clients of a
// previous process may still cache, and wraps the engine.
func (s *Server) startCache(ctx context.Context) error {
	s.cache = newCacheTable(s.cfg.LockLease, s.incarnation)
	var marked bool
	if err := s.kv.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(keyCacheHeld)
		marked = v != nil
		return err
	}); err != nil {
		return err
	}
	if marked {
		s.cacheMarked.Store(true)
		s.cache.grace(s.cfg.Now())
	}
	s.kv = &coherentEngine{Engine: s.kv, t: s.cache, now: s.cfg.Now}
	return nil
}

// cacheWait is a session's standing request for invalidations (it renews
// the session's cache lease and acknowledges what it applied): answered
// at once with what is queued, else when something is, else after the
// wait asked for (at most half a lease).
func (s *Server) cacheWait(ctx context.Context, req mdsproto.CacheWaitReq) (mdsproto.CacheWaitResp, error) {
	if req.Session == 0 {
		return mdsproto.CacheWaitResp{}, wire.Errorf(wire.ErrInvalid, "no session")
	}
	resp := mdsproto.CacheWaitResp{LeaseNs: int64(s.cfg.LockLease)}
	r, ok := s.cache.wait(s.cfg.Now(), req)
	if !ok {
		return resp, wire.Errorf(wire.ErrBusy, "the MDS has as many caching sessions as it may")
	}
	resp.Epoch = r.epoch
	if len(r.invs) == 0 && r.epoch == req.Epoch {
		wait := time.Duration(min(max(req.WaitNs, 0), lockWaitMaxNs, int64(s.cfg.LockLease/2)))
		t := time.NewTimer(wait)
		select {
		case <-r.wake:
		case <-t.C:
		case <-ctx.Done():
		case <-wire.ConnDone(ctx):
		}
		t.Stop()
		resp.Epoch, r.invs = s.cache.waited(req.Session, r.epoch)
	}
	resp.Invalidations = firstBytes(r.invs)
	return resp, nil
}

// firstBytes cuts invalidations to what fits an answer; the rest follow
// in the next.
func firstBytes(invs []mdsproto.Invalidation) []mdsproto.Invalidation {
	size := 0
	for i := range invs {
		if size += 24; size > maxInvalidationBytes {
			return invs[:max(i, 1)]
		}
	}
	return invs
}

// cacheLookup is a lookup (or with no name, a getattr) that the asking
// session may cache, if the answer says so.
func (s *Server) cacheLookup(ctx context.Context, req mdsproto.CacheLookupReq) (mdsproto.CacheLookupResp, error) {
	if req.Name != "" && !validName(req.Name) {
		return mdsproto.CacheLookupResp{}, wire.Errorf(wire.ErrInvalid, "name %q", req.Name)
	}
	gen := s.cache.begin()
	var out mdsproto.CacheLookupResp
	inos := []uint64{req.Dir}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		dir, err := getInode(r, req.Dir)
		if err != nil {
			return err
		}
		if req.Name == "" {
			out.Inode = &dir.Inode
			return nil
		}
		if dir.Type != mdsproto.TypeDir {
			return wire.Errorf(wire.ErrNotDir, "inode %d", req.Dir)
		}
		ino, ok, err := lookupChild(r, req.Dir, req.Name)
		if err != nil || !ok {
			return err
		}
		child, err := getInode(r, ino)
		if err != nil {
			return err
		}
		out.Inode = &child.Inode
		inos = append(inos, ino)
		return nil
	})
	if err != nil || req.Session == 0 {
		return out, err
	}
	if err := s.markCacheHeld(ctx); err != nil {
		return out, nil // answered, not granted
	}
	seq, ok := s.cache.grant(s.cfg.Now(), req.Session, req.Epoch, gen, inos...)
	s.cacheMarkMu.RUnlock()
	if ok {
		out.Grant, out.Seq = req.Epoch, seq
	}
	return out, nil
}

// validName reports whether name is one entry's name.
func validName(name string) bool {
	return len(name) <= 255 && name != "." && name != ".." && !bytes.ContainsAny([]byte(name), "/\x00")
}

// markCacheHeld stores the mark before a grant, if it is not there, and
// returns with cacheMarkMu read-held (the caller grants, then unlocks),
// so clearCacheHeld never deletes it between its check and a grant.
func (s *Server) markCacheHeld(ctx context.Context) error {
	s.cacheMarkMu.RLock()
	if s.cacheMarked.Load() {
		return nil
	}
	s.cacheMarkMu.RUnlock()
	s.cacheMarkMu.Lock()
	if !s.cacheMarked.Load() {
		if err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Put(keyCacheHeld, []byte{1}) }); err != nil {
			s.cacheMarkMu.Unlock()
			return err
		}
		s.cacheMarked.Store(true)
	}
	s.cacheMarkMu.Unlock()
	s.cacheMarkMu.RLock()
	return nil
}

// expireCaches ends silent sessions and removes the mark once none has
// cached for a lease.
func (s *Server) expireCaches(ctx context.Context) error {
	if !s.cache.expire(s.cfg.Now()) || !s.cacheMarked.Load() {
		return nil
	}
	s.cacheMarkMu.Lock()
	defer s.cacheMarkMu.Unlock()
	if !s.cache.expire(s.cfg.Now()) {
		return nil
	}
	if err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(keyCacheHeld) }); err != nil {
		return err
	}
	s.cacheMarked.Store(false)
	return nil
}
