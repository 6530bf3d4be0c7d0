package coresim

import (
	"time"

	"github.com/braidfs/braid/internal/core/cache"
)

// cacheClient is a client session's metadata cache.
type cacheClient struct {
	session uint64
	epoch   uint64 // 0: none yet (or the MDS restarted since)
	incarn  uint64
	// trustFrom is when it sent its last CacheWait: it trusts its cache
	// until a lease after.
	trustFrom time.Time
	acked     uint64            // the newest invalidation it has applied
	cached    map[uint64]uint64 // inode → the version it holds
	// reading is a read begun: the change counter and version it saw.
	reading *pendingRead
}

type pendingRead struct {
	ino, gen, version uint64
}

func (c *cacheClient) trusts(now time.Time, lease time.Duration) bool {
	return c.epoch != 0 && now.Before(c.trustFrom.Add(lease))
}

// pendingChange is a change between its first cover and its end.
type pendingChange struct {
	c         *cache.Change
	ino       uint64
	requester *cacheClient // nil: no caching session asked
	began     time.Time
	committed bool
	deleted   bool
}

// dirClaim is a write-back claim as the model knows it.
type dirClaim struct {
	holder uint64
	id     uint64
}

// cacheWait is a session's CacheWait: it acknowledges what it applied,
// renews its lease, and applies what is queued (dropping those inodes).
func (e *env) cacheWait() { e.cacheWaitOf(e.cacheC[e.rng.IntN(len(e.cacheC))]) }

func (e *env) cacheWaitOf(c *cacheClient) {
	if c.incarn != e.incarn {
		c.epoch, c.incarn, c.acked = 0, e.incarn, 0 // a new process: start again
	}
	sent := e.now
	epoch, invs, ok := e.cache.Wait(e.now, c.session, c.epoch, c.acked)
	e.applyCacheEffects()
	if !ok {
		e.note("cache-wait %d: full", c.session)
		return
	}
	if epoch != c.epoch {
		clear(c.cached) // a new epoch: everything cached is gone
		c.acked = 0
	}
	c.epoch, c.trustFrom = epoch, sent
	for _, inv := range invs {
		delete(c.cached, inv.Ino)
		c.acked = max(c.acked, inv.Seq)
	}
	e.note("cache-wait %d: epoch %d, %d queued", c.session, epoch&0xffffffff, len(invs))
}

func (e *env) applyCacheEffects() {
	fx := e.cache.TakeEffects()
	if len(fx.Woken) > 0 || len(fx.Acked) > 0 || len(fx.ClaimsEnded) > 0 {
		e.note("woke %v acks %v claims ended %v", fx.Woken, fx.Acked, fx.ClaimsEnded)
	}
}

// readBegin: a client reads an inode (a lookup): the change counter
// first, then the committed state.
func (e *env) readBegin() {
	c := e.cacheC[e.rng.IntN(len(e.cacheC))]
	ino := e.pickFile()
	if e.rng.IntN(4) == 0 {
		ino = e.claimDirOf(e.rng.IntN(len(e.cacheC)))
	}
	if cl, held := e.claims[ino]; held && cl.holder != c.session {
		return // the gate: the read recalls the claim first (recallClaim)
	}
	c.reading = &pendingRead{ino: ino, gen: e.cache.Begin(), version: e.version[ino]}
}

// readGrant: the read's answer asks to cache what it read.
func (e *env) readGrant() {
	c := e.cacheC[e.rng.IntN(len(e.cacheC))]
	r := c.reading
	if r == nil || c.epoch == 0 {
		return
	}
	c.reading = nil
	_, ok := e.cache.Grant(e.now, c.session, c.epoch, r.gen, r.ino)
	e.applyCacheEffects()
	e.note("grant %d to %d: %v", r.ino, c.session, ok)
	if !ok {
		return
	}
	if cl, held := e.claims[r.ino]; held && cl.holder != c.session {
		e.fail("inode %d granted to session %d while session %d holds its claim", r.ino, c.session, cl.holder)
	}
	c.cached[r.ino] = r.version
}

// change begins a change of an inode, by a client or by no one.
func (e *env) change() {
	if len(e.changes) >= 4 {
		return
	}
	ino := e.pickFile()
	var req *cacheClient
	var reqID uint64
	if e.rng.IntN(3) > 0 {
		req = e.cacheC[e.rng.IntN(len(e.cacheC))]
		reqID = req.session
	}
	pc := &pendingChange{c: cache.NewChange(reqID, false), ino: ino, requester: req, began: e.now, deleted: e.rng.IntN(8) == 0}
	e.changes = append(e.changes, pc)
	e.cover(pc)
}

// cover runs the change's transaction: it commits when the table says
// nothing is pending.
func (e *env) cover(pc *pendingChange) {
	if cl, held := e.claims[pc.ino]; held && (pc.requester == nil || cl.holder != pc.requester.session) {
		return // the gate: the claim is recalled first (recallClaim)
	}
	touched := map[uint64]cache.Touched{pc.ino: {Written: !pc.deleted, Deleted: pc.deleted}}
	wait, grace := e.cache.Cover(e.now, pc.c, touched)
	e.applyCacheEffects()
	e.note("cover %d: wait=%v grace=%v", pc.ino, wait, grace)
	if wait || grace {
		return
	}
	pc.committed = true
	e.version[pc.ino]++
	e.checkCoherent(pc)
	if pc.requester != nil && pc.c.Self[pc.ino] && pc.c.SelfEpoch == pc.requester.epoch {
		pc.requester.cached[pc.ino] = e.version[pc.ino] // its answer carries the change
	}
}

// checkCoherent: at a commit, no client that still trusts its cache
// holds the inode as it was before.
func (e *env) checkCoherent(pc *pendingChange) {
	for _, c := range e.cacheC {
		v, ok := c.cached[pc.ino]
		if ok && v < e.version[pc.ino] && c.trusts(e.now, e.cfg.Lease) {
			e.fail("inode %d changed to version %d while session %d trusts its cached version %d until +%v",
				pc.ino, e.version[pc.ino], c.session, v, c.trustFrom.Add(e.cfg.Lease).Sub(e.start))
		}
	}
}

// changeStep moves a pending change on: waits for acknowledgements
// (evicting laggards after the recall wait), commits, or ends.
func (e *env) changeStep() {
	if len(e.changes) == 0 {
		return
	}
	i := e.rng.IntN(len(e.changes))
	pc := e.changes[i]
	if pc.committed {
		e.cache.End(pc.c)
		e.applyCacheEffects()
		e.changes = append(e.changes[:i], e.changes[i+1:]...)
		e.note("end %d", pc.ino)
		return
	}
	session, _, waiting := e.cache.Pending(e.now, pc.c)
	if waiting && session != 0 && e.now.Sub(pc.began) >= cache.RecallWait {
		e.cache.EvictLaggards(pc.c)
		e.applyCacheEffects()
		e.note("evict laggards of %d", pc.ino)
		return
	}
	e.cover(pc) // run the transaction again
}

// claimDirOf is the directory session i made and may claim.
func (e *env) claimDirOf(i int) uint64 { return e.ino(e.cfg.Files + i) }

// claimDir: a client claims the directory it made.
func (e *env) claimDir() {
	i := e.rng.IntN(len(e.cacheC))
	c, dir := e.cacheC[i], e.claimDirOf(i)
	if c.epoch == 0 {
		return
	}
	if _, held := e.claims[dir]; held {
		return
	}
	e.claimID++
	if e.cache.GrantClaim(e.now, c.session, c.epoch, e.cache.Begin(), dir, e.claimID) {
		e.claims[dir] = dirClaim{holder: c.session, id: e.claimID}
		e.note("claim %d by %d", dir, c.session)
	}
	e.applyCacheEffects()
}

// recallClaim: another reader meets the claim; the holder flushes and
// releases it when it next waits (endClaim), or it is taken away past
// its deadline.
func (e *env) recallClaim() {
	dirs := sortedKeys(e.claims)
	if len(dirs) == 0 {
		return
	}
	dir := dirs[e.rng.IntN(len(dirs))]
	deadline, id, ok := e.cache.RecallClaim(e.now, dir)
	e.applyCacheEffects()
	e.note("recall claim %d: %v %d", dir, ok, id)
	if ok && !e.now.Before(deadline) {
		e.cache.EndClaim(dir, id) // taken away
		e.applyCacheEffects()
		delete(e.claims, dir)
	}
}

// endClaim: the holder releases its claim.
func (e *env) endClaim() {
	dirs := sortedKeys(e.claims)
	if len(dirs) == 0 {
		return
	}
	dir := dirs[e.rng.IntN(len(dirs))]
	e.cache.EndClaim(dir, e.claims[dir].id)
	e.applyCacheEffects()
	delete(e.claims, dir)
	e.note("end claim %d", dir)
}

// expire is the MDS's periodic sweep: silent cache sessions end, and
// claims whose holders are silent past their deadline are taken away.
func (e *env) expire() {
	idle := e.cache.Expire(e.now)
	empty, _ := e.locks.Empty(e.now)
	overdue := e.cache.Overdue(e.now)
	for _, dir := range sortedKeys(overdue) {
		e.cache.EndClaim(dir, overdue[dir])
		delete(e.claims, dir)
	}
	e.applyCacheEffects()
	e.applyLockEffects()
	e.note("expire: idle=%v locks empty=%v, %d claims taken", idle, empty, len(overdue))
}
