package mds

import (
	"context"
	"errors"
	"time"

	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// claimRec is a write-back claim as stored ('w'<dir be64>): its holder,
// its id (chosen by the holder, so it can release a claim whose grant it
// never heard of) and the range of inode
// numbers (before slot bits) its creates may take, [Lo, Hi). By is the
// principal that claimed it (claimBy): only the same one may flush.
type claimRec struct {
	V       int    `json:"v"`
	Session uint64 `json:"session"`
	Claim   uint64 `json:"claim"`
	Lo      uint64 `json:"lo"`
	Hi      uint64 `json:"hi"`
	// Next is the lowest number a create may still take: numbers are
	// taken in order, so none is given twice (a removed file's number
	// coming back would name another file to kernels that still hold it).
	Next uint64 `json:"next,omitempty"`
	By   string `json:"by,omitempty"`
}

// reserveInoRange is how many inode numbers a claim carries at once.
const reserveInoRange = 8192

// maxClaimClockSkewNs bounds how far a create's time from the holder may
// lie behind the MDS's clock (a later one, or one further behind, is
// replaced by the MDS's).
const maxClaimClockSkewNs = int64(10 * time.Minute)

type claimFlushKey struct{}

type readerKey struct{}

// withReader notes in ctx the caching session a read is for: a
// directory it holds a claim on is read without recalling the claim.
func withReader(ctx context.Context, session uint64) context.Context {
	if session == 0 {
		return ctx
	}
	return context.WithValue(ctx, readerKey{}, session)
}

// gateSession is the session a request in ctx reads or writes for, if
// it knows what that session's claims hold back (a flush, a listing or a
// cached lookup of the holder's, withReader): a holder's other requests
// (an rmdir, a path through its directory) recall its own claim first,
// since they would read the store without what it holds.
func gateSession(ctx context.Context) uint64 {
	s, _ := ctx.Value(readerKey{}).(uint64)
	return s
}

// checkClaimHolder refuses a change that names session as the holder of
// the claim on dir (to pass the claim's gate: withReader) when the claim
// is that session's but another principal's: a session number alone
// does not make its holder.
func checkClaimHolder(ctx context.Context, tx kv.Reader, dir, session uint64) error {
	var held claimRec
	if ok, err := getRecord(tx, claimKey(dir), &held); err != nil {
		return err
	} else if ok && held.Session == session && held.By != claimBy(ctx) {
		return wire.Errorf(wire.ErrPerm, "directory %d is claimed by another principal's session", dir)
	}
	return nil
}

// errClaimed rolls back a read or transaction that met a claim of
// another session's.
var errClaimed = errors.New("mds: directory claimed by another session")

// claimGate checks each key a transaction reads against the claims.
type claimGate struct {
	t       *cacheTable
	me      uint64
	blocked uint64 // the claimed directory met
}

// gatedDir is the directory whose claim covers key: a directory's times
// ('t') or entries ('d'). Its record ('i') is not: a claim's ops change
// only those (files made and unlinked change no directory's link count),
// so a path walk through it, or a permission check, reads the record as
// it is.
func gatedDir(key []byte) (uint64, bool) {
	if len(key) == 0 {
		return 0, false
	}
	switch key[0] {
	case pDirTimes:
		return inoOfKey(key)
	case pDirent:
		dir, _, ok := direntOfKey(key)
		return dir, ok
	}
	return 0, false
}

func (g *claimGate) check(key []byte) error {
	if g == nil || g.t.nClaims.Load() == 0 {
		return nil
	}
	dir, ok := gatedDir(key)
	if !ok {
		return nil
	}
	if g.t.claimBlocks(g.me, dir) {
		g.blocked = dir
		return errClaimed
	}
	return nil
}

// gateReader is a Reader whose reads pass the gate.
type gateReader struct {
	kv.Reader
	g *claimGate
}

func (r gateReader) Get(key []byte) ([]byte, error) {
	if err := r.g.check(key); err != nil {
		return nil, err
	}
	return r.Reader.Get(key)
}

// Scan gates directory entries ('d' keys) only: a sweep of inode
// records (repair, balance, status) reads no directory's names, and what a
// claim holds back of a directory's own record is its times.
func (r gateReader) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	if len(start) > 0 && start[0] == pDirent {
		if err := r.g.check(start); err != nil {
			return err
		}
	}
	var gateErr error
	err := r.Reader.Scan(start, end, func(k, v []byte) bool {
		if k[0] == pDirent {
			if gateErr = r.g.check(k); gateErr != nil {
				return false
			}
		}
		return fn(k, v)
	})
	if gateErr != nil {
		return gateErr
	}
	return err
}

// View reads through the gate: a read that meets another's claim is
// dropped, the claim recalled, and the read run again once it ended.
func (e *coherentEngine) View(ctx context.Context, fn func(kv.Reader) error) error {
	for round := 0; ; round++ {
		if e.t.nClaims.Load() == 0 {
			return e.Engine.View(ctx, fn)
		}
		g := &claimGate{t: e.t, me: gateSession(ctx)}
		err := e.Engine.View(ctx, func(r kv.Reader) error { return fn(gateReader{Reader: r, g: g}) })
		if g.blocked == 0 {
			return err
		}
		if round == maxInvalidateRounds {
			return wire.Errorf(wire.ErrBusy, "directory claimed through %d recalls", round)
		}
		if err := e.awaitClaim(ctx, g.blocked); err != nil {
			return err
		}
	}
}

// awaitClaim recalls the claim on dir and waits until it has ended: the
// holder released it, or its deadline passed and it was taken away.
func (e *coherentEngine) awaitClaim(ctx context.Context, dir uint64) error {
	for {
		ended, deadline, id, ok := e.t.recallClaim(e.now(), dir)
		if !ok {
			return nil
		}
		if wait := deadline.Sub(e.now()); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ended:
				t.Stop()
				return nil
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			continue
		}
		if err := e.takeClaim(ctx, dir, id); err != nil {
			return err
		}
	}
}

// takeClaim ends a claim whose holder did not release it in time: its
// record goes first, so a flush of the holder's that comes later is
// refused rather than applied over what others do next.
func (e *coherentEngine) takeClaim(ctx context.Context, dir, id uint64) error {
	return takeClaim(ctx, e.Engine, e.t, dir, id)
}

func takeClaim(ctx context.Context, eng kv.Engine, t *cacheTable, dir, id uint64) error {
	err := eng.Update(ctx, func(tx kv.Txn) error {
		var rec claimRec
		ok, err := getRecord(tx, claimKey(dir), &rec)
		if err != nil || !ok || rec.Claim != id {
			return err
		}
		return tx.Delete(claimKey(dir))
	})
	if err != nil {
		return err
	}
	t.endClaim(dir, id)
	return nil
}

// loadClaims takes the claims stored by an earlier process (start).
func (c *metaCaches) loadClaims(ctx context.Context) error {
	type found struct{ dir, holder, id uint64 }
	var all []found
	err := c.kv.View(ctx, func(r kv.Reader) error {
		all = all[:0]
		return r.Scan(firstKey(pClaim), pastKeys(pClaim), func(k, v []byte) bool {
			var rec claimRec
			if dir, ok := inoOfKey(k); ok && decodeRecord(v, &rec) == nil {
				all = append(all, found{dir, rec.Session, rec.Claim})
			}
			return true
		})
	})
	if err != nil {
		return err
	}
	for _, f := range all {
		c.table.loadClaim(c.cfg.Now(), f.dir, f.holder, f.id)
	}
	return nil
}

// claim claims an empty directory for a caching session, or extends
// the session's claim with a new range of inode numbers.
func (c *metaCaches) claim(ctx context.Context, req mdsproto.DirClaimReq) (mdsproto.DirClaimResp, error) {
	if req.Session == 0 || req.Dir == 0 || req.Claim == 0 {
		return mdsproto.DirClaimResp{}, wire.Errorf(wire.ErrInvalid, "a claim needs a session, a directory and an id")
	}
	if c.table.noGrants() {
		return mdsproto.DirClaimResp{}, wire.Errorf(wire.ErrBusy, "this MDS grants no claims")
	}
	// The session reads as itself: its own claim's gate lets it through
	// (a holder extending its claim waits for nothing of its own).
	ctx = withReader(ctx, req.Session)
	if req.Extend {
		return c.extendClaim(ctx, req)
	}
	gen := c.table.begin()
	var out mdsproto.DirClaimResp
	var rec claimRec
	var again bool
	err := c.kv.Update(ctx, func(tx kv.Txn) error {
		again = false
		dir, err := getInode(tx, req.Dir)
		if err != nil {
			return err
		}
		if dir.Type != mdsproto.TypeDir {
			return wire.Errorf(wire.ErrNotDir, "inode %d", req.Dir)
		}
		if err := whoOf(ctx).need(dir, permW|permX, dir.Name); err != nil {
			return err
		}
		if empty, err := dirEmpty(tx, dir.Ino); err != nil {
			return err
		} else if !empty {
			return wire.Errorf(wire.ErrNotEmpty, "only an empty directory is claimed")
		}
		// The files made under the claim will be placed as the
		// directory's layout says: refused now if it cannot be (too few
		// OSDs up), rather than after its creates were acknowledged.
		spec, err := inheritedLayout(tx, dir, c.shell.defaultLayout())
		if err != nil {
			return err
		}
		if _, err := c.shell.place(placement.SmallFileSpec(spec, -1), -1); err != nil {
			return err
		}
		var held claimRec
		if ok, err := getRecord(tx, claimKey(dir.Ino), &held); err != nil {
			return err
		} else if ok && held.Session == req.Session && held.Claim == req.Claim && held.By == claimBy(ctx) {
			rec, again = held, true // asked again (its answer was lost)
			out.Dir = dir.Inode
			return nil
		} else if ok {
			return wire.Errorf(wire.ErrBusy, "directory %d is claimed", dir.Ino)
		}
		lo, err := takeFromCounter(tx, keyNextIno, rootIno+1, reserveInoRange)
		if err != nil {
			return err
		}
		rec = claimRec{V: 1, Session: req.Session, Claim: req.Claim, Lo: lo, Hi: lo + reserveInoRange, Next: lo, By: claimBy(ctx)}
		out.Dir = dir.Inode
		return putRecord(tx, claimKey(dir.Ino), &rec)
	})
	if err != nil {
		return out, err
	}
	if again {
		if !c.table.holds(req.Dir, req.Session, req.Claim) {
			return out, wire.Errorf(wire.ErrRecalled, "claim %d on directory %d has ended", req.Claim, req.Dir)
		}
		return c.claimResp(out, rec, route.SlotOf(req.Dir)), nil
	}
	granted := false
	if err := c.markHeld(ctx); err == nil {
		granted = c.table.grantClaim(c.cfg.Now(), req.Session, req.Epoch, gen, req.Dir, rec.Claim)
		c.markMu.RUnlock()
	}
	if !granted {
		if err := takeClaim(ctx, c.kv, c.table, req.Dir, rec.Claim); err != nil {
			return out, err
		}
		return out, wire.Errorf(wire.ErrBusy, "directory %d is cached or changing elsewhere", req.Dir)
	}
	return c.claimResp(out, rec, route.SlotOf(req.Dir)), nil
}

// claimResp is the answer a granted (or extended) claim gets: the range
// left to it.
func (c *metaCaches) claimResp(out mdsproto.DirClaimResp, rec claimRec, slot uint32) mdsproto.DirClaimResp {
	out.Claim = rec.Claim
	out.InoBase = rec.Next<<route.SlotBits | uint64(slot&route.SlotMask)
	out.InoStep = 1 << route.SlotBits
	out.InoCount = rec.Hi - rec.Next
	out.MaxOps = c.maxFlushOps
	return out
}

// flushOpsFor is how many ops one DirFlush may carry on an engine that
// lets a transaction write writes keys (0: no limit): a create writes
// two (its inode, its entry), and the batch a few more (the directory's
// times, the claim, the once record and the records it drops).
func flushOpsFor(writes int) int {
	if writes <= 0 {
		return mdsproto.MaxDirFlushOps
	}
	return min(mdsproto.MaxDirFlushOps, max(1, (writes-16)/3))
}

// extendClaim gives a held claim a new range; its old one is no longer
// accepted.
func (c *metaCaches) extendClaim(ctx context.Context, req mdsproto.DirClaimReq) (mdsproto.DirClaimResp, error) {
	if !c.table.holds(req.Dir, req.Session, req.Claim) {
		return mdsproto.DirClaimResp{}, wire.Errorf(wire.ErrRecalled, "no claim %d on directory %d", req.Claim, req.Dir)
	}
	var out mdsproto.DirClaimResp
	var rec claimRec
	err := c.kv.Update(ctx, func(tx kv.Txn) error {
		if err := c.heldClaim(ctx, tx, req.Dir, req.Session, req.Claim, &rec); err != nil {
			return err
		}
		lo, err := takeFromCounter(tx, keyNextIno, rootIno+1, reserveInoRange)
		if err != nil {
			return err
		}
		rec.Lo, rec.Hi, rec.Next = lo, lo+reserveInoRange, lo
		dir, err := getInode(tx, req.Dir)
		if err != nil {
			return err
		}
		out.Dir = dir.Inode
		return putRecord(tx, claimKey(req.Dir), &rec)
	})
	if err != nil {
		return out, err
	}
	return c.claimResp(out, rec, route.SlotOf(req.Dir)), nil
}

// heldClaim reads the claim on dir into rec and checks that it is
// session's claim id, made by the same principal.
func (c *metaCaches) heldClaim(ctx context.Context, tx kv.Reader, dir, session, id uint64, rec *claimRec) error {
	ok, err := getRecord(tx, claimKey(dir), rec)
	if err != nil {
		return err
	}
	if !ok || rec.Session != session || rec.Claim != id || rec.By != claimBy(ctx) {
		return wire.Errorf(wire.ErrRecalled, "claim %d on directory %d has ended", id, dir)
	}
	return nil
}

// dirFlush applies a claim holder's creates and unlinks in one
// transaction.
func (s *Server) dirFlush(ctx context.Context, req mdsproto.DirFlushReq) (mdsproto.DirFlushResp, error) {
	if len(req.Ops) > s.caches.maxFlushOps {
		return mdsproto.DirFlushResp{}, wire.Errorf(wire.ErrInvalid, "%d ops in one flush, at most %d", len(req.Ops), s.caches.maxFlushOps)
	}
	if req.Session == 0 || requesterOf(ctx) != req.Session {
		return mdsproto.DirFlushResp{}, wire.Errorf(wire.ErrInvalid, "a flush is a named mutation of the claim's session")
	}
	if err := s.applyFlush(ctx, req); err != nil {
		return mdsproto.DirFlushResp{}, err
	}
	return s.flushOpen(ctx, req), nil
}

// flushOpen opens the file a flush asks for, if it may be opened (the
// flush itself succeeded: a failed open is not its failure).
func (s *Server) flushOpen(ctx context.Context, req mdsproto.DirFlushReq) mdsproto.DirFlushResp {
	if req.Open == nil {
		return mdsproto.DirFlushResp{}
	}
	r, err := s.open(ctx, *req.Open)
	if err != nil {
		s.cfg.Log.Debug("open with a flush", "ino", req.Open.Ino, "err", err)
		return mdsproto.DirFlushResp{}
	}
	return mdsproto.DirFlushResp{Open: &r}
}

// applyFlush applies a flush's ops (and its release) in one transaction.
func (s *Server) applyFlush(ctx context.Context, req mdsproto.DirFlushReq) error {
	ctx = withReader(context.WithValue(ctx, claimFlushKey{}, true), req.Session)
	err := s.mutate(ctx, func(tx kv.Txn) error {
		var rec claimRec
		if err := s.caches.heldClaim(ctx, tx, req.Dir, req.Session, req.Claim, &rec); err != nil {
			return err
		}
		dir, err := getInode(tx, req.Dir)
		if err != nil {
			return err
		}
		who := whoOf(ctx)
		if err := who.need(dir, permW|permX, dir.Name); err != nil {
			return err
		}
		f := flusher{s: s, tx: tx, who: who, dir: dir, rec: &rec, now: s.cfg.Now().UnixNano()}
		next := rec.Next
		for i, op := range req.Ops {
			if err := f.apply(op); err != nil {
				return wrapOp(i, op, err)
			}
		}
		if req.Release {
			return tx.Delete(claimKey(req.Dir))
		}
		if rec.Next != next {
			return putRecord(tx, claimKey(req.Dir), &rec)
		}
		return nil
	})
	if errors.Is(err, kv.ErrTooLarge) {
		// Send fewer at a time (the holder sends them one by one).
		return wire.Errorf(wire.ErrInvalid, "%d ops too many for one transaction: %v", len(req.Ops), err)
	}
	if err == nil && req.Release {
		s.caches.table.endClaim(req.Dir, req.Claim)
	}
	return err
}

// wrapOp names the op of a flush that failed, keeping its code.
func wrapOp(i int, op mdsproto.DirOp, err error) error {
	var re *wire.RemoteError
	if errors.As(err, &re) {
		return wire.Errorf(re.Code, "op %d (%q): %s", i, op.Name, re.Msg)
	}
	return err
}

// flusher applies one flush's ops to its directory.
type flusher struct {
	s    *Server
	tx   kv.Txn
	who  *caller
	dir  *inodeRec
	rec  *claimRec
	now  int64
	spec *layout.Spec // the layout new files inherit, once read
	sync string       // the write-sync policy new files inherit, read with spec
}

func (f *flusher) apply(op mdsproto.DirOp) error {
	if err := checkName(op.Name); err != nil {
		return err
	}
	if op.Remove {
		return f.remove(op.Name)
	}
	return f.create(op)
}

func (f *flusher) remove(name string) error {
	ino, ok, err := lookupChild(f.tx, f.dir.Ino, name)
	if err != nil {
		return err
	}
	if !ok {
		return wire.Errorf(wire.ErrNotFound, "no such entry")
	}
	rec, err := getInode(f.tx, ino)
	if err != nil {
		return err
	}
	if rec.Type == mdsproto.TypeDir {
		return wire.Errorf(wire.ErrIsDir, "a directory")
	}
	if !f.who.mayUnlink(f.dir, rec) {
		return wire.Errorf(wire.ErrPerm, "another's entry in a sticky directory")
	}
	if err := f.tx.Delete(direntKey(f.dir.Ino, name)); err != nil {
		return err
	}
	if err := touchParent(f.tx, f.dir, false, f.now); err != nil {
		return err
	}
	return f.s.dropLink(f.tx, rec)
}

func (f *flusher) create(op mdsproto.DirOp) error {
	if _, ok, err := lookupChild(f.tx, f.dir.Ino, op.Name); err != nil {
		return err
	} else if ok {
		return wire.Errorf(wire.ErrExists, "exists")
	}
	n := op.Ino >> route.SlotBits
	if uint32(op.Ino&route.SlotMask) != route.SlotOf(f.dir.Ino)&route.SlotMask || n < max(f.rec.Lo, f.rec.Next) || n >= f.rec.Hi {
		return wire.Errorf(wire.ErrInvalid, "inode %d is not the claim's to give (or was given)", op.Ino)
	}
	f.rec.Next = n + 1
	if v, err := f.tx.Get(inodeKey(op.Ino)); err != nil {
		return err
	} else if v != nil {
		return wire.Errorf(wire.ErrExists, "inode %d is in use", op.Ino)
	}
	if f.spec == nil {
		spec, err := inheritedLayout(f.tx, f.dir, f.s.cl.DefaultLayout)
		if err != nil {
			return err
		}
		if f.sync, err = inheritedSync(f.tx, f.dir); err != nil {
			return err
		}
		f.spec = &spec
	}
	hint := int64(-1)
	if op.SizeHint > 0 {
		hint = op.SizeHint
	}
	l, err := f.s.placeAcknowledged(placement.SmallFileSpec(*f.spec, hint), hint)
	if err != nil {
		return err
	}
	t := op.TimeNs
	if t > f.now || t < f.now-maxClaimClockSkewNs {
		t = f.now
	}
	rec := &inodeRec{Inode: mdsproto.Inode{Ino: op.Ino, Type: mdsproto.TypeFile, Mode: op.Mode & 0o7777, Nlink: 1,
		MtimeNs: t, CtimeNs: t, AtimeNs: t}}
	if op.MtimeNs != 0 || op.AtimeNs != 0 {
		if who := f.who; who != nil && who.uid != 0 {
			return wire.Errorf(wire.ErrPerm, "times set with a create are root's to set")
		}
		if op.MtimeNs != 0 {
			rec.MtimeNs = op.MtimeNs
		}
		if op.AtimeNs != 0 {
			rec.AtimeNs = op.AtimeNs
		}
	}
	f.s.dressFile(rec, f.dir, f.who, op.Uid, op.Gid, l)
	inheritSync(rec, f.sync)
	rec.Parent, rec.Name = f.dir.Ino, op.Name
	return addEntry(f.tx, f.dir, op.Name, rec)
}

// placeAcknowledged places an empty file a claim holder acknowledged: on
// OSDs up if it can, else on any it knows (a writer then meets the ones
// down as it meets OSDs that died after its file was placed), so that an
// OSD's death between the claim and the flush loses no create.
func (s *Server) placeAcknowledged(spec layout.Spec, sizeHint int64) (layout.Layout, error) {
	l, err := s.place(spec, sizeHint)
	if err == nil {
		return l, nil
	}
	known := s.cluster.knownCandidates()
	s.rng.mu.Lock()
	defer s.rng.mu.Unlock()
	if l, kerr := placement.Place(spec, sizeHint, known, s.rng.r); kerr == nil {
		return l, nil
	}
	return l, err
}

// claimBy names the principal a request came from (on an open server,
// no one): the users a flush's ops act as are checked op by op.
func claimBy(ctx context.Context) string {
	if p, ok := principal(ctx); ok {
		return p.Name
	}
	return ""
}

// expireClaims takes away the claims of holders silent past their
// deadline (run with the cache's expiry).
func (c *metaCaches) expireClaims(ctx context.Context) {
	for dir, id := range c.table.overdue(c.cfg.Now()) {
		_ = takeClaim(ctx, c.kv, c.table, dir, id)
	}
}
