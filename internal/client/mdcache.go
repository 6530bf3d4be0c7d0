package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// A metadata cache kept coherent by the MDS's callbacks (the MDS's
// cache.go): lookups and attributes are answered from memory while the
// MDS has granted them, for as long as that lasts — no fixed timeout. The
// MDS tells this client of every change to what it caches and waits for
// the acknowledgement before committing the change, so a change made
// anywhere is seen here at once. The cache is trusted only while the
// session's lease holds (counted from before the last CacheWait that was
// answered was sent), so a client cut off from the MDS stops answering
// from it before the MDS may commit without it.
type mdCache struct {
	c *Client
	// pool carries the CacheWait on a connection of its own: the MDS
	// handles a bounded number of requests per connection at once, and
	// changes waiting for this client's acknowledgement must not keep
	// the request that carries it from being read.
	pool *wire.Pool

	mu         sync.Mutex
	epoch      uint64    // the MDS's name for this cache's registrations; 0 while there is none
	validUntil time.Time // the lease
	applied    uint64    // the newest invalidation applied
	recent     []recall  // the newest invalidations applied, oldest first (at most recentRecalls)
	localGen   uint64    // lookups sent before this changed are not kept
	attrs      map[uint64]Attr
	entries    map[uint64]map[string]uint64 // dir → name → ino (0: no such entry)
	complete   map[uint64]bool              // dirs whose every entry is in entries (a name not there is not in the dir)
	suspended  map[uint64]suspendedDir      // dirs recalled by this client's own change, until its answer
	nEntries   int
	registered map[uint64]struct{}         // inodes the MDS counts this client as caching
	full       bool                        // the bounds are reached: start a new epoch
	onChange   func(ino uint64, self bool) // told of every inode whose attributes changed
	hits       atomic.Uint64               // answers from memory (for tests)
	ready      chan struct{}               // closed when the cache first has an epoch
	readyOnce  sync.Once
}

const (
	maxCachedInodes  = 1 << 18 // inodes a client caches (the MDS's bound per session)
	maxCachedEntries = 1 << 20 // names a client caches
	maxSuspendedDirs = 1 << 12 // directories awaiting their own change's answer
)

// recentRecalls bounds the invalidations a client remembers, to tell
// whether an answer granted before some of them concerns what they
// recalled.
const recentRecalls = 4096

type recall struct{ seq, ino uint64 }

// recalledSinceLocked reports whether an invalidation newer than seq
// (the newest one queued before a grant) recalled ino, or may have:
// such a grant is stale for ino.
func (m *mdCache) recalledSinceLocked(ino, seq uint64) bool {
	if m.applied <= seq {
		return false
	}
	if len(m.recent) == 0 || m.recent[0].seq > seq+1 {
		return true // forgotten: assume it did
	}
	for i := len(m.recent) - 1; i >= 0 && m.recent[i].seq > seq; i-- {
		if m.recent[i].ino == ino {
			return true
		}
	}
	return false
}

// suspendedDir is what was cached of a directory that a change of this
// client's recalled: its answer may say the rest is still good (Kept).
type suspendedDir struct {
	entries  map[string]uint64
	complete bool
	seq      uint64 // the recall's
}

// CacheMetadata makes the client answer LookupAt and GetAttr from a cache
// the MDS keeps coherent. onChange, if set, is called (never with the
// cache's lock held) with every inode whose cached attributes were
// dropped because it changed, so a caller that caches further (a
// kernel) can drop its copy too, before the MDS is told it was dropped;
// ino 0 means everything was dropped. self says the change is one this
// client asked for: the MDS keeps the client registered on the inode
// while it runs, so a change by anyone else meanwhile is reported as
// well. It starts a standing request at
// the MDS that lives as long as the client.
func (c *Client) CacheMetadata(onChange func(ino uint64, self bool)) {
	m := &mdCache{c: c, onChange: onChange, pool: wire.NewPoolOn(c.mdsNetwork()), ready: make(chan struct{})}
	m.flushLocked()
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	if c.mdc != nil {
		return
	}
	c.mdc = m
	go m.run()
}

func (c *Client) metaCache() *mdCache {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	return c.mdc
}

// run keeps a CacheWait at the MDS for as long as the client lives.
func (m *mdCache) run() {
	defer m.pool.Close()
	backoff := 20 * time.Millisecond
	for m.c.life.Err() == nil {
		m.mu.Lock()
		req := mdsproto.CacheWaitReq{Session: m.c.once.id, Epoch: m.epoch, Acked: m.applied, WaitNs: int64(time.Second)}
		var dropped []changedInode
		if m.full {
			// Start over: the MDS ends this epoch's registrations at
			// once, so first drop everything here and in the caller.
			dropped = m.flushLocked()
			req.Epoch, req.Acked, m.epoch, m.applied, m.full = 0, 0, 0, 0, false
		}
		m.mu.Unlock()
		m.notify(dropped)
		sent := time.Now()
		var resp mdsproto.CacheWaitResp
		meta, err := m.c.mdsMetaOn(m.c.life, m.pool, mdsproto.OpCacheWait, req)
		if err == nil {
			err = mdsproto.Unmarshal(meta, &resp)
		}
		if err != nil {
			// The cache lapses with its lease; the MDS counts the same.
			Pause(m.c.life, backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 20 * time.Millisecond
		m.recallClaims(resp) // before the lease is renewed: nothing more is answered under them
		m.notify(m.apply(resp, sent))
	}
}

// recallClaims has the write-back sender release the claims resp
// recalls, or every claim in a new epoch (the MDS restarted, or no longer
// counts this client): it sends what they hold first (writeback.go). The
// MDS waits for the releases, not for these recalls' acknowledgements.
func (m *mdCache) recallClaims(resp mdsproto.CacheWaitResp) {
	w := m.c.wbIfAny()
	if w == nil {
		return
	}
	m.mu.Lock()
	newEpoch := resp.Epoch != m.epoch
	m.mu.Unlock()
	if newEpoch {
		w.recallAll()
		return
	}
	for _, inv := range resp.Invalidations {
		if inv.Claim {
			w.recall(inv.Ino)
		}
	}
}

// changedInode is an inode whose attributes changed, and whether by a
// change of this client's.
type changedInode struct {
	ino  uint64
	self bool
}

// apply takes a CacheWait's answer and returns the inodes whose
// attributes changed.
func (m *mdCache) apply(resp mdsproto.CacheWaitResp, sent time.Time) []changedInode {
	m.mu.Lock()
	defer m.mu.Unlock()
	var changed []changedInode
	if resp.Epoch != m.epoch {
		// A new epoch: the MDS no longer counts this client as caching
		// anything it had (new session, eviction, another MDS process).
		changed = m.flushLocked()
		m.epoch, m.applied, m.recent = resp.Epoch, 0, m.recent[:0]
	}
	for _, inv := range resp.Invalidations {
		if inv.Seq <= m.applied {
			continue
		}
		m.applied = inv.Seq
		if len(m.recent) == recentRecalls {
			m.recent = append(m.recent[:0], m.recent[recentRecalls/2:]...)
		}
		m.recent = append(m.recent, recall{seq: inv.Seq, ino: inv.Ino})
		delete(m.suspended, inv.Ino)
		if inv.Self && (m.entries[inv.Ino] != nil || m.complete[inv.Ino]) {
			// A directory this client changes: set aside what it knew,
			// for the change's answer to give back (mdsproto.CacheSelf
			// Kept). Only the newest recall's can be given back, so
			// clearing the lot loses nothing that could be.
			if len(m.suspended) >= maxSuspendedDirs {
				clear(m.suspended)
			}
			m.suspended[inv.Ino] = suspendedDir{entries: m.entries[inv.Ino], complete: m.complete[inv.Ino], seq: inv.Seq}
		}
		m.dropLocked(inv.Ino)
		changed = append(changed, changedInode{inv.Ino, inv.Self})
	}
	if resp.Epoch != 0 {
		m.validUntil = sent.Add(time.Duration(resp.LeaseNs))
		m.readyOnce.Do(func() { close(m.ready) })
	}
	return changed
}

// flushLocked drops everything and returns the inodes it held, after an
// entry with ino 0 that stands for all of them: the MDS may have counted
// this client on more than it holds (a directory its own change recalled
// and did not grant again stays registered there).
func (m *mdCache) flushLocked() []changedInode {
	all := []changedInode{{ino: 0}}
	for ino := range m.registered {
		all = append(all, changedInode{ino: ino})
	}
	m.attrs, m.entries, m.nEntries = map[uint64]Attr{}, map[uint64]map[string]uint64{}, 0
	m.complete, m.suspended = map[uint64]bool{}, map[uint64]suspendedDir{}
	m.registered = map[uint64]struct{}{}
	m.localGen++
	return all
}

// dropLocked forgets ino: its attributes and entries.
func (m *mdCache) dropLocked(ino uint64) {
	delete(m.registered, ino)
	delete(m.attrs, ino)
	m.nEntries -= len(m.entries[ino])
	delete(m.entries, ino)
	delete(m.complete, ino)
}

func (m *mdCache) notify(inos []changedInode) {
	if m.onChange == nil {
		return
	}
	for _, c := range inos {
		m.onChange(c.ino, c.self)
	}
}

// validLocked reports whether the cache may answer now.
func (m *mdCache) validLocked() bool {
	return m.epoch != 0 && time.Now().Before(m.validUntil)
}

// get answers a lookup (name set) or getattr from memory: found reports
// whether the cache knew, ok whether the entry exists.
func (m *mdCache) get(dir uint64, name string) (a Attr, ok, found bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.validLocked() {
		return Attr{}, false, false
	}
	ino := dir
	if name != "" {
		var known bool
		if ino, known = m.entries[dir][name]; !known {
			// A directory known whole has no such entry.
			return Attr{}, false, m.complete[dir]
		}
		if ino == 0 {
			return Attr{}, false, true
		}
	}
	a, found = m.attrs[ino]
	return a, found, found
}

// lookup asks the MDS for what get did not know and keeps the answer
// if it was granted and nothing changed since the request was sent.
func (m *mdCache) lookup(ctx context.Context, dir uint64, name string) (Attr, error) {
	if a, ok, found := m.get(dir, name); found {
		m.hits.Add(1)
		if !ok {
			return Attr{}, wire.Errorf(wire.ErrNotFound, "%q in directory %d", name, dir)
		}
		return a, nil
	}
	m.mu.Lock()
	req := mdsproto.CacheLookupReq{Dir: dir, Name: name, Session: m.c.once.id, Epoch: m.epoch}
	gen := m.localGen
	m.mu.Unlock()
	var resp mdsproto.CacheLookupResp
	if err := m.c.mds(ctx, mdsproto.OpCacheLookup, req, &resp); err != nil {
		return Attr{}, err
	}
	m.keep(dir, name, gen, resp)
	if resp.Inode == nil {
		return Attr{}, wire.Errorf(wire.ErrNotFound, "%q in directory %d", name, dir)
	}
	return *resp.Inode, nil
}

// keep caches a granted answer unless an invalidation the MDS queued
// after granting it has been applied already, or a change of this
// client's began since its request was sent (either may concern it).
func (m *mdCache) keep(dir uint64, name string, gen uint64, resp mdsproto.CacheLookupResp) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if resp.Grant == 0 || resp.Grant != m.epoch || gen != m.localGen || !m.validLocked() ||
		m.recalledSinceLocked(dir, resp.Seq) || (resp.Inode != nil && m.recalledSinceLocked(resp.Inode.Ino, resp.Seq)) {
		return
	}
	if len(m.registered) >= maxCachedInodes-2 || m.nEntries >= maxCachedEntries {
		m.full = true
		return
	}
	m.registered[dir] = struct{}{}
	if name == "" {
		m.attrs[dir] = *resp.Inode
		return
	}
	ents := m.entries[dir]
	if ents == nil {
		ents = map[string]uint64{}
		m.entries[dir] = ents
	}
	if _, ok := ents[name]; !ok {
		m.nEntries++
	}
	if resp.Inode == nil {
		ents[name] = 0
		return
	}
	ents[name] = resp.Inode.Ino
	m.attrs[resp.Inode.Ino] = *resp.Inode
	m.registered[resp.Inode.Ino] = struct{}{}
}

// self takes what the MDS granted again with a change this client asked
// for (mdsproto.CacheSelf): the inodes as committed, the entries the
// change wrote, and what was cached of the directories it kept. made is a
// directory the change created, empty (known whole from now on).
func (m *mdCache) self(s *mdsproto.CacheSelf, made uint64) {
	if m == nil || s == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := s.Epoch == m.epoch && m.validLocked() &&
		len(m.registered)+len(s.Inodes) < maxCachedInodes && m.nEntries+len(s.Entries) < maxCachedEntries
	// An inode recalled again since the change (by a later change)
	// is not taken: the later change is newer than this answer.
	stale := map[uint64]bool{}
	for _, in := range s.Inodes {
		if !ok || m.recalledSinceLocked(in.Ino, s.Seq) {
			stale[in.Ino] = true
		}
	}
	for _, k := range s.Kept {
		if sp, found := m.suspended[k.Ino]; found && sp.seq == k.Seq && !stale[k.Ino] {
			if sp.entries != nil {
				m.nEntries += len(sp.entries) - len(m.entries[k.Ino])
				m.entries[k.Ino] = sp.entries
			}
			m.complete[k.Ino] = sp.complete
		}
	}
	for _, in := range s.Inodes {
		delete(m.suspended, in.Ino)
		if stale[in.Ino] {
			continue
		}
		m.attrs[in.Ino] = in
		m.registered[in.Ino] = struct{}{}
		if in.Ino == made && in.Type == mdsproto.TypeDir {
			m.complete[in.Ino] = true
		}
	}
	for _, e := range s.Entries {
		if _, registered := m.registered[e.Dir]; !registered || stale[e.Dir] {
			continue
		}
		ents := m.entries[e.Dir]
		if ents == nil {
			ents = map[string]uint64{}
			m.entries[e.Dir] = ents
		}
		if _, had := ents[e.Name]; !had {
			m.nEntries++
		}
		ents[e.Name] = e.Ino
	}
}

// changing is called around each change this client makes: lookups on
// their way meanwhile are not kept.
func (m *mdCache) changing() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.localGen++
	m.mu.Unlock()
}

// CachedFor reports how long a may be cached further by the caller (a
// kernel): the rest of the lease if the cache holds a's inode as a has
// it, else 0 (the answer was not granted, or has changed since).
func (c *Client) CachedFor(a Attr) time.Duration {
	m := c.metaCache()
	if m == nil {
		return 0
	}
	if c.wbIfAny().holdsAttr(a) {
		return m.leaseLeft()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	held, ok := m.attrs[a.Ino]
	if !ok || !m.validLocked() || !sameStat(held, a) {
		return 0
	}
	return time.Until(m.validUntil)
}

// CachedEntryFor reports how long the caller (a kernel) may keep the name
// in dir as naming ino: the rest of the lease if the cache holds that
// entry under dir's registration, else 0. A caller that keeps names must
// drop them all when it is told of a change to dir (CacheMetadata's
// onChange), before that call returns.
func (c *Client) CachedEntryFor(dir uint64, name string, ino uint64) time.Duration {
	m := c.metaCache()
	if m == nil || ino == 0 {
		return 0
	}
	if c.wbIfAny().holdsEntry(dir, name, ino) {
		return m.leaseLeft()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if got, ok := m.entries[dir][name]; !ok || got != ino || !m.validLocked() {
		return 0
	}
	return time.Until(m.validUntil)
}

// leaseLeft is what is left of the cache's lease (0 if none).
func (m *mdCache) leaseLeft() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.validLocked() {
		return 0
	}
	return time.Until(m.validUntil)
}

// maxEpochWait bounds how long a mkdir waits for a cache just started to
// get its first epoch, to claim what it made (writeback.go): one round
// trip, as a rule.
const maxEpochWait = time.Second

// awaitEpoch waits until the cache has had an epoch (at most
// maxEpochWait), and reports whether it has.
func (m *mdCache) awaitEpoch(ctx context.Context) bool {
	select {
	case <-m.ready:
		return true
	default:
	}
	t := time.NewTimer(maxEpochWait)
	defer t.Stop()
	select {
	case <-m.ready:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
