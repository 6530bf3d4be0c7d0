package mds

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// keyCacheHeld marks that clients may cache under grants of this store's
// MDS: a process that finds it at start waits one lease (cache.go). It is
// set before the first grant after it was cleared, and cleared once no
// session has cached for a lease.

const (
	maxInvalidateRounds = 8 // invalidate-and-retry rounds one change may take
)

// errMustInvalidate rolls back a transaction whose changes some caching
// session has not been told of yet.
var errMustInvalidate = errors.New("mds: cached inodes to invalidate first")

// metaCaches serves metadata caching (internal/core/cache): the standing
// CacheWait of each client, lookups that register what they answer, the
// mark that caches may be held, and write-back directory claims.
type metaCaches struct {
	kv    kv.Engine
	cfg   *Config
	shell cacheShell
	route *router     // whether several processes are active
	table *cacheTable // who caches which inodes (cache.go)
	// maxFlushOps bounds the ops one DirFlush may carry on this engine
	// (claim_ops.go).
	maxFlushOps int
	marked      atomic.Bool // keyCacheHeld is stored
	markMu      sync.RWMutex
}

// cacheShell is what metadata caches ask of the rest of the MDS.
type cacheShell interface {
	// place lays out a file of spec (a claimed directory's files are
	// placed where the claim is granted, to check that they can be).
	place(spec layout.Spec, sizeHint int64) (layout.Layout, error)
	// defaultLayout is the cluster's layout for files whose directories
	// name none.
	defaultLayout() string
}

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
	var last map[uint64]*touched
	defer func() {
		if c != nil {
			e.t.end(c)
		}
	}()
	for round := 0; ; round++ {
		var mustWait, inGrace bool
		var blocked uint64
		err := e.Engine.Update(ctx, func(tx kv.Txn) error {
			mustWait, inGrace, blocked = false, false, 0
			rt := &touchTxn{Txn: tx, gate: &claimGate{t: e.t, me: gateSession(ctx)}}
			err := fn(rt)
			if rt.gate.blocked == 0 && err == nil {
				rt.gate.blocked = rt.blockingWrite()
			}
			if blocked = rt.gate.blocked; blocked != 0 {
				return errClaimed
			}
			if err != nil {
				return err
			}
			last = rt.touched
			if len(rt.touched) == 0 {
				return nil
			}
			if c == nil {
				c = newChange(requesterOf(ctx), ctx.Value(claimFlushKey{}) != nil)
			}
			mustWait, inGrace = e.t.cover(e.now(), c, rt.touched)
			if inGrace || mustWait {
				return errMustInvalidate
			}
			return nil
		})
		if blocked != 0 {
			if round == maxInvalidateRounds {
				return wire.Errorf(wire.ErrBusy, "directory claimed through %d recalls", round)
			}
			if err := e.awaitClaim(ctx, blocked); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, errMustInvalidate) {
			if err == nil && c != nil {
				noteSelf(ctx, c, last)
			}
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

// requesterOf is the caching session a named mutation came from.
func requesterOf(ctx context.Context) uint64 {
	if slot, ok := ctx.Value(onceCtxKey{}).(*onceSlot); ok {
		return slot.Session
	}
	return 0
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

// touchTxn notes the inodes whose record ('i' keys) or entries ('d'
// keys) a transaction writes, with what it wrote last.
type touchTxn struct {
	kv.Txn
	touched map[uint64]*touched
	gate    *claimGate
}

func (t *touchTxn) Get(key []byte) ([]byte, error) {
	if err := t.gate.check(key); err != nil {
		return nil, err
	}
	return t.Txn.Get(key)
}

func (t *touchTxn) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	return gateReader{Reader: t.Txn, g: t.gate}.Scan(start, end, fn)
}

// blockingWrite is a directory the transaction wrote that another
// session holds a claim on (0 if none).
func (t *touchTxn) blockingWrite() uint64 {
	for ino := range t.touched {
		if t.gate.t.claimBlocks(t.gate.me, ino) {
			return ino
		}
	}
	return 0
}

// touched is what a transaction wrote of one inode: its record (nil if
// deleted, or not written) and, for a directory, its entries (0: removed).
type touched struct {
	rec     []byte
	deleted bool // the record was deleted
	entries map[string]uint64
}

func (t *touchTxn) Put(key, value []byte) error { t.note(key, value); return t.Txn.Put(key, value) }
func (t *touchTxn) Delete(key []byte) error     { t.note(key, nil); return t.Txn.Delete(key) }

func (t *touchTxn) note(key, value []byte) {
	if len(key) == 0 {
		return
	}
	var ino uint64
	var name string
	var ok bool
	switch key[0] {
	case pInode, pDirTimes:
		ino, ok = inoOfKey(key)
	case pDirent:
		ino, name, ok = direntOfKey(key)
	}
	if !ok {
		return
	}
	if t.touched == nil {
		t.touched = map[uint64]*touched{}
	}
	tc := t.touched[ino]
	if tc == nil {
		tc = &touched{}
		t.touched[ino] = tc
	}
	switch key[0] {
	case pInode:
		tc.rec, tc.deleted = value, value == nil
		return
	case pDirTimes:
		return // a directory's times: it is touched (touchDir notes its record)
	}
	if tc.entries == nil {
		tc.entries = map[string]uint64{}
	}
	tc.entries[name] = 0
	if len(value) == 8 {
		tc.entries[name] = beUint64(value)
	}
}

// noteSelf adds what a committed change granted its requester again to
// the named mutation's answer (several updates of one request merge: a
// later one's inodes replace an earlier one's, and one it touched without
// granting is taken out, since the requester no longer holds it).
func noteSelf(ctx context.Context, c *change, touched map[uint64]*touched) {
	slot, ok := ctx.Value(onceCtxKey{}).(*onceSlot)
	if !ok || c == nil {
		return
	}
	if slot.self == nil {
		slot.self = &selfNote{inodes: map[uint64]mdsproto.Inode{}, kept: map[uint64]uint64{}}
	}
	n := slot.self
	for ino, tc := range touched {
		delete(n.inodes, ino)
		delete(n.kept, ino)
		n.entries = slices.DeleteFunc(n.entries, func(e mdsproto.SelfEntry) bool { return e.Dir == ino })
		if !c.Self[ino] {
			continue
		}
		var rec inodeRec
		if decodeRecord(tc.rec, &rec) != nil {
			continue
		}
		n.inodes[ino] = rec.Inode
		if seq, ok := c.Kept[ino]; ok {
			n.kept[ino] = seq
		}
		for name, child := range tc.entries {
			n.entries = append(n.entries, mdsproto.SelfEntry{Dir: ino, Name: name, Ino: child})
		}
	}
	// The answer's Seq is the first grant's: a recall queued after it
	// may concern what that grant handed over.
	switch {
	case n.epoch == 0 && n.seq == 0:
		n.seq, n.epoch = c.SelfSeq, c.SelfEpoch
	case n.epoch != c.SelfEpoch:
		n.epoch = 0 // granted in two epochs: the client takes none of it
	default:
		n.seq = min(n.seq, c.SelfSeq)
	}
}

// selfNote is a named mutation's CacheSelf as its updates commit.
type selfNote struct {
	epoch, seq uint64
	inodes     map[uint64]mdsproto.Inode
	entries    []mdsproto.SelfEntry
	kept       map[uint64]uint64
}

func (n *selfNote) answer() *mdsproto.CacheSelf {
	if n == nil || n.epoch == 0 || len(n.inodes) == 0 {
		return nil
	}
	out := &mdsproto.CacheSelf{Epoch: n.epoch, Seq: n.seq, Entries: n.entries}
	for _, in := range n.inodes {
		out.Inodes = append(out.Inodes, in)
	}
	for ino, seq := range n.kept {
		out.Kept = append(out.Kept, mdsproto.SelfKept{Ino: ino, Seq: seq})
	}
	return out
}

// appendSelf adds "cache_self": self to an answer encoded as a CBOR map
// (every MDS answer is a struct); another encoding is left as it is.
func appendSelf(meta []byte, self *mdsproto.CacheSelf) []byte {
	return mdsproto.AppendField(meta, "cache_self", self)
}

// start sets up the table, in grace if the store says clients of a
// previous process may still cache, and wraps the engine.
func (c *metaCaches) start(ctx context.Context, incarnation uint64) error {
	c.table = newCacheTable(c.cfg.LockLease, incarnation)
	// Several active processes grant nothing yet (multi.go): a grant
	// would need its recall by whichever process changes the inode.
	c.table.setNoGrants(c.route.multi())
	var marked bool
	if err := c.kv.View(ctx, func(r kv.Reader) error {
		v, err := r.Get(keyCacheHeld)
		marked = v != nil
		return err
	}); err != nil {
		return err
	}
	if marked {
		c.marked.Store(true)
		c.table.grace(c.cfg.Now(), c.cfg.TakeoverGrace)
	}
	c.kv = &coherentEngine{Engine: c.kv, t: c.table, now: c.cfg.Now}
	return c.loadClaims(ctx)
}

// wait is a session's standing request for invalidations (it renews
// the session's cache lease and acknowledges what it applied): answered
// at once with what is queued, else when something is, else after the
// wait asked for (at most half a lease).
func (c *metaCaches) wait(ctx context.Context, req mdsproto.CacheWaitReq) (mdsproto.CacheWaitResp, error) {
	if req.Session == 0 {
		return mdsproto.CacheWaitResp{}, wire.Errorf(wire.ErrInvalid, "no session")
	}
	resp := mdsproto.CacheWaitResp{LeaseNs: int64(c.cfg.LockLease)}
	r, ok := c.table.wait(c.cfg.Now(), req)
	if !ok {
		return resp, wire.Errorf(wire.ErrBusy, "the MDS has as many caching sessions as it may")
	}
	resp.Epoch = r.epoch
	if len(r.invs) == 0 && r.epoch == req.Epoch {
		wait := time.Duration(min(max(req.WaitNs, 0), lockWaitMaxNs, int64(c.cfg.LockLease/2)))
		t := time.NewTimer(wait)
		select {
		case <-r.wake:
		case <-t.C:
		case <-ctx.Done():
		case <-wire.ConnDone(ctx):
		}
		t.Stop()
		resp.Epoch, r.invs = c.table.waited(req.Session, r.epoch)
	}
	resp.Invalidations = r.invs
	return resp, nil
}

// lookup is a lookup (or with no name, a getattr) that the asking
// session may cache, if the answer says so.
func (c *metaCaches) lookup(ctx context.Context, req mdsproto.CacheLookupReq) (mdsproto.CacheLookupResp, error) {
	if req.Name != "" && !mdsproto.ValidName(req.Name) {
		return mdsproto.CacheLookupResp{}, wire.Errorf(wire.ErrInvalid, "name %q", req.Name)
	}
	ctx = withReader(ctx, req.Session) // its own claims' gates let it through
	gen := c.table.begin()
	var out mdsproto.CacheLookupResp
	var inos []uint64
	err := c.kv.View(ctx, func(r kv.Reader) error {
		inos, out = []uint64{req.Dir}, mdsproto.CacheLookupResp{} // a run again (claim_ops.go) starts over
		dir, err := getInode(r, req.Dir)
		if err != nil {
			return err
		}
		if req.Name == "" {
			if err := whoOf(ctx).reachable(r, dir); err != nil {
				return err
			}
			out.Inode = &dir.Inode
			return nil
		}
		if dir.Type != mdsproto.TypeDir {
			return wire.Errorf(wire.ErrNotDir, "inode %d", req.Dir)
		}
		who := whoOf(ctx)
		if err := who.searchUp(r, dir); err != nil {
			return err
		}
		if err := who.need(dir, permX, req.Name); err != nil {
			return err
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
	if err != nil || req.Session == 0 || c.table.noGrants() {
		return out, err
	}
	if err := c.markHeld(ctx); err != nil {
		return out, nil // answered, not granted
	}
	seq, ok := c.table.grant(c.cfg.Now(), req.Session, req.Epoch, gen, inos...)
	c.markMu.RUnlock()
	if ok {
		out.Grant, out.Seq = req.Epoch, seq
	}
	return out, nil
}

// markHeld stores the mark before a grant, if it is not there, and
// returns with markMu read-held (the caller grants, then unlocks),
// so expire never deletes it between its check and a grant.
func (c *metaCaches) markHeld(ctx context.Context) error {
	c.markMu.RLock()
	if c.marked.Load() {
		return nil
	}
	c.markMu.RUnlock()
	c.markMu.Lock()
	if !c.marked.Load() {
		if err := c.kv.Update(ctx, func(tx kv.Txn) error { return tx.Put(keyCacheHeld, []byte{1}) }); err != nil {
			c.markMu.Unlock()
			return err
		}
		c.marked.Store(true)
	}
	c.markMu.Unlock()
	c.markMu.RLock()
	return nil
}

// expire ends silent sessions and removes the mark once none has
// cached for a lease.
func (c *metaCaches) expire(ctx context.Context) error {
	c.expireClaims(ctx)
	if !c.table.expire(c.cfg.Now()) || !c.marked.Load() {
		return nil
	}
	c.markMu.Lock()
	defer c.markMu.Unlock()
	if !c.table.expire(c.cfg.Now()) {
		return nil
	}
	if err := c.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(keyCacheHeld) }); err != nil {
		return err
	}
	c.marked.Store(false)
	return nil
}
