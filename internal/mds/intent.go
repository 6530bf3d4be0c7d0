package mds

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/staged"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// The intent log (Slice's intention log, Sigma's two-phase commit). A
// client that changes part of a stripe holding committed data records an
// intent here, stages every unit on its OSD, then commits the intent (the
// commit point) and applies the stages. The resolver finishes what a
// crashed client left: committed intents are rolled forward (staged units
// applied), prepared ones rolled back (stages dropped). A unit whose OSD
// is gone for good is marked dirty, and rebuilt like any lost component.
//
// Writers also hold a lease on their file (orphan.go): if a client dies
// with the file open, its last full-stripe writes may have reached some
// OSDs and not others, so the file is queued for a scrub, which recomputes
// any parity that disagrees with the data.

const (
	intentPrepared  = "prepared"
	intentCommitted = "committed"
	// intentResolving: the resolver took the prepared intent to roll it
	// back; no commit of it is accepted from then on. Taken in a
	// transaction before any stage is aborted, so the process that
	// accepts commits (the file's owner, on its own clock) and the one
	// resolving (the leader, on another) never both act on it.
	intentResolving   = "resolving"
	maxIntentsPerFile = 256 // staged stripe writes one file may have open
)

// intentRec is one staged stripe write, keyed n<ino><txid>.
type intentRec struct {
	Format    int      `json:"v"`
	State     string   `json:"state"`
	Version   uint64   `json:"version"` // layout version the units were staged under
	Comps     []uint32 `json:"comps"`   // components not yet applied or aborted
	OSDs      []uint32 `json:"osds"`    // OSD of each entry in Comps when staged
	ExpiresNs int64    `json:"expires_ns"`
}

// intents serves the two-phase commit of partial-stripe writes at the
// MDS (internal/core/staged): a writer's intent begun, committed and
// done, and the leader's resolver, which finishes intents whose writers
// went silent.
type intents struct {
	kv      kv.Engine
	cfg     *Config
	leases  *leaseTable // writers' handles, which an intent must name
	sights  *sights     // when a stamped deadline passes here
	keys    *keyRing    // capabilities for the resolver's sends
	osds    *osdClient  // the resolver's sends
	cluster *clusterMap // which OSDs are up, down or gone
	shell   intentShell
}

// intentShell is what intents ask of the rest of the MDS.
type intentShell interface {
	needOwner(ino uint64) error
	leading() bool
}

func (ir *intents) begin(ctx context.Context, req mdsproto.IntentReq) (struct{}, error) {
	if err := ir.shell.needOwner(req.Ino); err != nil {
		return struct{}{}, err // the writer's lease is there
	}
	now := ir.cfg.Now()
	expires := now.Add(ir.cfg.IntentTTL).UnixNano()
	err := ir.kv.Update(ctx, func(tx kv.Txn) error {
		rec, err := getInode(tx, req.Ino)
		if err != nil {
			return err
		}
		if req.Handle == 0 || !ir.leases.writes(req.Ino, req.Handle, now) {
			if err := whoOf(ctx).mayAccess(tx, rec, permWrite); err != nil {
				return err
			}
		}
		if rec.Layout == nil {
			return wire.Errorf(wire.ErrIsDir, "inode %d", req.Ino)
		}
		if ir.sights.repairActive(req.Ino, rec.Repair, now) {
			return wire.Errorf(wire.ErrBusy, "inode %d is being repaired", req.Ino)
		}
		if rec.Layout.Version != req.Version {
			return wire.Errorf(wire.ErrStale, "inode %d is at layout version %d, intent has %d", req.Ino, rec.Layout.Version, req.Version)
		}
		if len(req.Comps) == 0 || len(req.Comps) > len(rec.Layout.OSDs) {
			return wire.Errorf(wire.ErrInvalid, "intent names %d components", len(req.Comps))
		}
		n := 0
		if err := tx.Scan(intentPrefix(req.Ino), pastPrefix(intentPrefix(req.Ino)), func(k, v []byte) bool {
			n++
			return n < maxIntentsPerFile
		}); err != nil {
			return err
		}
		if n >= maxIntentsPerFile {
			return wire.Errorf(wire.ErrBusy, "inode %d has %d staged writes open", req.Ino, n)
		}
		in := intentRec{Format: recFormat, State: intentPrepared, Version: req.Version, ExpiresNs: expires}
		for _, c := range req.Comps {
			if int(c) >= len(rec.Layout.OSDs) || slices.Contains(in.Comps, c) {
				return wire.Errorf(wire.ErrInvalid, "component %d", c)
			}
			in.Comps = append(in.Comps, c)
			in.OSDs = append(in.OSDs, rec.Layout.OSDs[c])
		}
		return putRecord(tx, intentKey(req.Ino, req.Txid), &in)
	})
	if err == nil && ir.cfg.LeadUntil != nil {
		// Seen here as it is stamped: its commit is judged by the stamp's
		// own clock (sights.go), not a window from a later first sight.
		_, _ = ir.sights.passes(sightID{kind: sightIntent, key: string(intentKey(req.Ino, req.Txid)), stamp: expires}, ir.cfg.IntentTTL, now)
	}
	return struct{}{}, err
}

// commit is the commit point of a staged write.
func (ir *intents) commit(ctx context.Context, req mdsproto.IntentReq) (struct{}, error) {
	err := ir.kv.Update(ctx, func(tx kv.Txn) error {
		var in intentRec
		ok, err := getRecord(tx, intentKey(req.Ino, req.Txid), &in)
		if err != nil {
			return err
		}
		state := staged.Prepared
		if in.State == intentCommitted {
			state = staged.Committed
		}
		switch staged.Commit(ok && (in.State == intentCommitted || in.State == intentPrepared), state, ir.cfg.Now().UnixNano() >= ir.sights.deadline(sightIntent, intentKey(req.Ino, req.Txid), in.ExpiresNs, ir.cfg.IntentTTL)) {
		case staged.AlreadyCommitted:
			return nil // sent again after its reply was lost: the first copy committed it
		case staged.Unknown:
			return wire.Errorf(wire.ErrNotFound, "no prepared intent %x on inode %d (expired and rolled back?)", req.Txid, req.Ino)
		case staged.Expired:
			// The resolver takes expired intents and rolls prepared ones
			// back, aborting their stages before it removes the record:
			// committed now, the writer would take the aborted stages for
			// applied ones.
			return wire.Errorf(wire.ErrNotFound, "intent %x on inode %d expired before its commit", req.Txid, req.Ino)
		}
		in.State = intentCommitted
		return putRecord(tx, intentKey(req.Ino, req.Txid), &in)
	})
	return struct{}{}, err
}

func (ir *intents) done(ctx context.Context, req mdsproto.IntentReq) (struct{}, error) {
	return struct{}{}, ir.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(intentKey(req.Ino, req.Txid)) })
}

// hasIntents reports whether ino has staged writes not yet resolved: a
// repair must not read the file until they are.
func hasIntents(r kv.Reader, ino uint64) (bool, error) {
	found := false
	err := r.Scan(intentPrefix(ino), pastPrefix(intentPrefix(ino)), func(k, v []byte) bool {
		found = true
		return false
	})
	return found, err
}

func (s *Server) renew(ctx context.Context, req mdsproto.RenewReq) (mdsproto.RenewResp, error) {
	if req.Handle == 0 {
		return mdsproto.RenewResp{}, wire.Errorf(wire.ErrInvalid, "no handle")
	}
	if err := s.router.needOwner(req.Ino); err != nil {
		return mdsproto.RenewResp{}, err
	}
	now := s.cfg.Now()
	var noteErr error
	if req.Release && len(req.Uncommitted) > 0 && s.leases.writes(req.Ino, req.Handle, now) {
		noteErr = s.intents.noteUncommitted(ctx, req.Ino, req.Uncommitted)
	}
	if req.Release && !req.Read {
		s.locks.table.dropHandle(req.Ino, req.Handle) // a closed writer's extent locks go with its lease
	}
	if !req.Release && !req.Read {
		// A writer's lease is the file's write access (mayWriteHandle):
		// one not held yet is taken only with the access itself.
		if err := s.mayWriteHandle(ctx, req.Ino, req.Handle); err != nil {
			return mdsproto.RenewResp{}, err
		}
	}
	if !req.Release && req.Read && !s.leases.holds(req.Ino, req.Handle) {
		// A reader's lease keeps an unlinked file: taken only by one who
		// may read it.
		if err := s.mayIno(ctx, req.Ino, permOpenR); err != nil {
			return mdsproto.RenewResp{}, err
		}
	}
	resp, err := s.leases.renew(req.Ino, req.Handle, !req.Read, now, s.cfg.WriterLease, req.Release)
	if err == nil {
		err = noteErr // the lease is released all the same
	}
	return resp, err
}

// renewBatch renews the leases of many handles of one client.
func (s *Server) renewBatch(ctx context.Context, req mdsproto.RenewBatchReq) (mdsproto.RenewResp, error) {
	if len(req.Leases) > mdsproto.MaxRenewBatch {
		return mdsproto.RenewResp{}, wire.Errorf(wire.ErrInvalid, "%d leases in one renewal, at most %d", len(req.Leases), mdsproto.MaxRenewBatch)
	}
	// One bad entry does not cost the others their renewal.
	var out mdsproto.RenewResp
	var errs []error
	for _, l := range req.Leases {
		resp, err := s.renew(ctx, mdsproto.RenewReq{Ino: l.Ino, Handle: l.Handle, Read: l.Read})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = resp
	}
	if len(errs) > 0 {
		if len(errs) < len(req.Leases) {
			// Some renewed here: the batch sent again elsewhere would not
			// help them; the client regroups the rest by a new table.
			return out, wire.Errorf(wire.ErrInvalid, "%d of %d leases not renewed: %v", len(errs), len(req.Leases), errs[0])
		}
		return out, fmt.Errorf("%d of %d leases not renewed: %w", len(errs), len(req.Leases), errs[0])
	}
	return out, nil
}

// noteUncommitted raises the extents of a file that never had a name (an
// Atomic create its writer, holding the lease, gave up on) to how far the
// writer's uncommitted writes reached, so the deletion queue counts the
// space its objects hold. Any other file's extents only ever come from
// commits: readers vouch for data against them (an unlinked file may
// still be read through open handles).
func (ir *intents) noteUncommitted(ctx context.Context, ino uint64, ext []int64) error {
	return ir.kv.Update(ctx, func(tx kv.Txn) error {
		rec, err := getInode(tx, ino)
		if err != nil || !rec.Unnamed || rec.Layout == nil {
			return nil // gone already, or named (perhaps unlinked, still read): not counted
		}
		if len(ext) != rec.Layout.Groups {
			return wire.Errorf(wire.ErrInvalid, "%d uncommitted extents for %d groups", len(ext), rec.Layout.Groups)
		}
		next := slices.Clone(rec.Extents)
		if len(next) != len(ext) {
			next = make([]int64, len(ext))
		}
		for g, e := range ext {
			if e < 0 || e > layout.MaxObjectBytes {
				return wire.Errorf(wire.ErrInvalid, "uncommitted extent %d", e)
			}
			next[g] = max(next[g], e)
		}
		rec.Extents = next
		return putInode(tx, rec)
	})
}

// resolveLoop rolls intents of crashed clients forward or back and queues
// files whose writer died for a scrub.
func (s *Server) resolveLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ResolveEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.router.leading() {
			if err := s.intents.resolvePass(kv.AsLeader(ctx)); err != nil && ctx.Err() == nil {
				s.cfg.Log.Warn("intent resolution", "err", err)
			}
			if !s.router.multi() {
				// nobody else asks for scrubs
			} else if err := s.repairs.takeWantedScrubs(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Log.Warn("scrubs wanted by other MDS processes", "err", err)
			}
		}
		if err := s.expireWriters(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("writer lease expiry", "err", err)
		}
		if err := s.reapOrphans(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("orphan reaping", "err", err)
		}
		if err := s.locks.clearHeld(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("extent lock mark", "err", err)
		}
		if err := s.caches.expire(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("metadata cache mark", "err", err)
		}
		if !s.router.leading() {
			continue // keys are the leader's to retire
		}
		if err := s.keys.retireKeys(); err != nil {
			s.cfg.Log.Warn("capability key retirement", "err", err)
		}
	}
}

type intentItem struct {
	ino, txid uint64
	rec       intentRec
}

const resolveBatch = 256

func (ir *intents) resolvePass(ctx context.Context) error {
	now := ir.cfg.Now()
	var items []intentItem
	err := ir.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(firstKey(pIntent), pastKeys(pIntent), func(k, v []byte) bool {
			var it intentItem
			var ok bool
			if it.ino, it.txid, ok = pairOfKey(k); ok && decodeRecord(v, &it.rec) == nil && len(it.rec.Comps) == len(it.rec.OSDs) &&
				now.UnixNano() >= ir.sights.deadline(sightIntent, k, it.rec.ExpiresNs, ir.cfg.IntentTTL) {
				items = append(items, it)
			}
			return len(items) < resolveBatch
		})
	})
	if err != nil {
		return err
	}
	views := ir.cluster.views(now)
	for _, it := range items {
		if !ir.shell.leading() {
			return nil // a successor resolves them, on its own clock
		}
		if err := ir.resolve(ctx, it, views, now); err != nil {
			return err
		}
	}
	return nil
}

// take takes the intent at key for the resolver unless it was
// committed (then it is rolled forward) or is gone.
func (ir *intents) take(ctx context.Context, key []byte) (committed, gone bool, err error) {
	err = ir.kv.Update(ctx, func(tx kv.Txn) error {
		committed, gone = false, false
		var in intentRec
		ok, err := getRecord(tx, key, &in)
		switch {
		case err != nil:
			return err
		case !ok:
			gone = true
			return nil
		case in.State == intentCommitted:
			committed = true
			return nil
		case in.State == intentResolving:
			return nil
		}
		in.State = intentResolving
		return putRecord(tx, key, &in)
	})
	return committed, gone, err
}

// resolve finishes one expired intent as far as the OSDs allow: it
// reads the intent's file, has staged.Plan decide each unit, sends what
// the plan says, and writes what the answers leave.
func (ir *intents) resolve(ctx context.Context, it intentItem, views map[uint32]cluster.View, now time.Time) error {
	var ver uint64
	var extents []int64 // per group, how far objects hold written data
	width := 1
	err := ir.kv.View(ctx, func(r kv.Reader) error {
		rec, err := getInode(r, it.ino)
		if err == nil && rec.Layout != nil {
			ver, extents = rec.Layout.Version, rec.Extents
			width = max(1, len(rec.Layout.OSDs)/max(1, rec.Layout.Groups))
		}
		return nil
	})
	if err != nil {
		return err
	}
	key := intentKey(it.ino, it.txid)
	if ver == 0 { // file gone: its objects (and stages) are deleted with it
		return ir.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(key) })
	}
	state := staged.Prepared
	committed, gone, err := ir.take(ctx, key)
	switch {
	case err != nil:
		return err
	case gone:
		return nil // finished meanwhile
	case committed:
		state = staged.Committed
	}
	units := make([]staged.IntentUnit, len(it.rec.Comps))
	for i, comp := range it.rec.Comps {
		v, known := views[it.rec.OSDs[i]]
		g := int(comp) / width
		units[i] = staged.IntentUnit{Comp: comp, OSD: staged.OSDStateOf(v, known), HoldsData: g < len(extents) && extents[g] > 0}
	}
	res := staged.Plan(state, units)
	recreated := ir.sendResolution(ctx, it, res, ver, now)
	return ir.kv.Update(ctx, func(tx kv.Txn) error {
		lost := slices.Clone(res.Lost)
		if len(lost)+len(recreated) > 0 {
			rec, err := getInode(tx, it.ino)
			if err == nil && rec.Layout != nil {
				// An apply that had to create its object found it lost:
				// below the stage it holds holes, not the file's data.
				for _, comp := range recreated {
					if stillLost(rec, []uint32{comp}, 0) {
						lost = append(lost, comp)
					}
				}
				if err := addDirty(rec, lost); err != nil {
					return err
				}
				if err := putInode(tx, rec); err != nil {
					return err
				}
			}
		}
		if res.Done() {
			return tx.Delete(key)
		}
		// Only what is left changes: the state is the resolver's or a
		// commit's, as the record holds it now, never the scan's.
		var cur intentRec
		ok, err := getRecord(tx, key, &cur)
		if err != nil || !ok {
			return err
		}
		cur.Comps, cur.OSDs = nil, nil
		for _, i := range res.Left {
			cur.Comps, cur.OSDs = append(cur.Comps, it.rec.Comps[i]), append(cur.OSDs, it.rec.OSDs[i])
		}
		return putRecord(tx, key, &cur)
	})
}

// sendResolution sends the apply or abort of each unit res says to send
// and gives res the answers; it returns the components whose apply had
// to create its object.
func (ir *intents) sendResolution(ctx context.Context, it intentItem, res *staged.Resolution, ver uint64, now time.Time) (recreated []uint32) {
	op := osdproto.OpAbort
	if res.Apply() {
		op = osdproto.OpApply
	}
	c := ir.keys.ring.Issue(it.ino, capability.Write, ver, now.Add(time.Minute))
	for _, i := range res.Send {
		comp, id := it.rec.Comps[i], it.rec.OSDs[i]
		req := osdproto.Req{Cap: c, Ino: it.ino, Comp: comp, Txid: it.txid}
		if res.MustExist(i) {
			req.Flags = osdproto.FlagMustExist
		}
		meta, err := ir.osds.callData(ctx, id, op, req, nil, now)
		out := staged.Unreachable
		switch {
		case err == nil:
			out = staged.Done
		case osdproto.UnitBroken(err):
			out = staged.Broken
		}
		switch res.Answer(i, out) {
		case staged.Lost:
			ir.cfg.Log.Warn("staged write given up: the unit is rebuilt", "ino", it.ino, "comp", comp, "osd", id, "state", it.rec.State, "err", err)
			_ = ir.osds.call(ctx, id, osdproto.OpAbort, osdproto.Req{Cap: c, Ino: it.ino, Comp: comp, Txid: it.txid}, now)
		case staged.Wait:
			ir.cfg.Log.Warn("staged write not resolved yet", "ino", it.ino, "comp", comp, "osd", id, "state", it.rec.State, "err", err)
		case staged.Drop:
			if err != nil {
				ir.cfg.Log.Warn("staged write given up: its stage could not be aborted", "ino", it.ino, "comp", comp, "osd", id, "err", err)
			}
		}
		if wr, derr := osdproto.DecodeWriteReply(meta); err == nil && op == osdproto.OpApply && derr == nil && wr.Created {
			recreated = append(recreated, comp)
		}
	}
	return recreated
}

// expireWriters queues the files of writers whose lease ran out (the
// client died) for a scrub.
func (s *Server) expireWriters(ctx context.Context) error {
	if inos := s.leases.expireWriters(s.cfg.Now()); len(inos) > 0 {
		s.labels.queue(inos...) // a writer that never committed left objects unlabelled
		return s.repairs.wantScrub(ctx, inos)
	}
	return nil
}
