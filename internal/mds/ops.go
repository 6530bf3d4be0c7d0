package mds

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

func (s *Server) lookup(ctx context.Context, req mdsproto.PathReq) (mdsproto.Inode, error) {
	var rec *inodeRec
	err := s.kv.View(ctx, func(r kv.Reader) error {
		var err error
		rec, err = resolve(r, whoOf(ctx), req.Dir, req.Path)
		return err
	})
	if err != nil {
		return mdsproto.Inode{}, err
	}
	return rec.Inode, nil
}

// stat describes an inode and where a file's components live, in one
// round trip and without a capability.
func (s *Server) stat(ctx context.Context, req mdsproto.PathReq) (mdsproto.StatResp, error) {
	in, err := s.lookup(ctx, req)
	if err != nil {
		return mdsproto.StatResp{}, err
	}
	out := mdsproto.StatResp{Inode: in}
	if in.Layout != nil {
		out.Endpoints = s.cluster.endpoints(in.Layout.OSDs, s.cfg.Now())
	}
	return out, nil
}

// newInode makes an inode in slot (internal/core/route) with a number from this
// process's range (inorange.go), or, with the range drained, from the
// counter.
func (s *Server) newInode(tx kv.Txn, typ string, mode uint32, slot uint32) (*inodeRec, error) {
	n, ok := s.inos.take()
	if !ok {
		var err error
		if n, err = nextCounter(tx, keyNextIno, rootIno+1); err != nil {
			return nil, err
		}
	}
	ino, err := route.InoInSlot(n, slot)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now().UnixNano()
	return &inodeRec{Inode: mdsproto.Inode{Ino: ino, Type: typ, Mode: mode & 0o7777, Nlink: 1, MtimeNs: now, CtimeNs: now, AtimeNs: now}}, nil
}

func link(tx kv.Txn, dir *inodeRec, name string, child *inodeRec) error {
	return tx.Put(direntKey(dir.Ino, name), binary.BigEndian.AppendUint64(nil, child.Ino))
}

func (s *Server) mkdir(ctx context.Context, req mdsproto.MkdirReq) (mdsproto.Inode, error) {
	parts, err := splitPath(req.Path)
	if err != nil {
		return mdsproto.Inode{}, err
	}
	if len(parts) == 0 {
		if req.Parents {
			return s.lookup(ctx, mdsproto.PathReq{Path: "/"})
		}
		return mdsproto.Inode{}, wire.Errorf(wire.ErrExists, "/")
	}
	var out *inodeRec
	s.ensureInodes(ctx, len(parts))
	underClaim := req.Session != 0 && req.Dir != 0 && len(parts) == 1
	if underClaim {
		ctx = withReader(ctx, req.Session) // the holder's claim lets it through
	}
	err = s.mutate(ctx, func(tx kv.Txn) error {
		base := req.Dir
		if base == 0 {
			base = rootIno
		}
		if underClaim {
			if err := checkClaimHolder(ctx, tx, base, req.Session); err != nil {
				return err
			}
		}
		cur, err := getInode(tx, base)
		if err != nil {
			return err
		}
		who := whoOf(ctx)
		if req.Dir != 0 {
			if err := who.searchUp(tx, cur); err != nil {
				return err
			}
		}
		for i, name := range parts {
			if cur.Type != mdsproto.TypeDir {
				return wire.Errorf(wire.ErrNotDir, "%s: a component is not a directory", req.Path)
			}
			if err := who.need(cur, permX, req.Path); err != nil {
				return err
			}
			ino, ok, err := lookupChild(tx, cur.Ino, name)
			if err != nil {
				return err
			}
			last := i == len(parts)-1
			if ok {
				if last && !req.Parents {
					return wire.Errorf(wire.ErrExists, "%s", req.Path)
				}
				if cur, err = getInode(tx, ino); err != nil {
					return err
				}
				if last && cur.Type != mdsproto.TypeDir {
					return wire.Errorf(wire.ErrExists, "%s exists and is not a directory", req.Path)
				}
				continue
			}
			if !last && !req.Parents {
				return wire.Errorf(wire.ErrNotFound, "%s: parent does not exist", req.Path)
			}
			if err := who.need(cur, permW|permX, req.Path); err != nil {
				return err
			}
			d, err := s.newInode(tx, mdsproto.TypeDir, req.Mode, route.NewDirSlot(cur.Ino, name, s.cfg.MkdirSwitch, s.draw()))
			if err != nil {
				return err
			}
			d.Uid, d.Gid = who.owner(req.Uid, req.Gid)
			inheritGroup(cur, d)
			d.Nlink, d.Parent, d.Name = 2, cur.Ino, name
			cur.Nlink++
			if err := addEntry(tx, cur, name, d); err != nil {
				return err
			}
			cur = d
		}
		out = cur
		noteOnce(ctx, cur.Inode)
		return nil
	})
	if err != nil {
		return mdsproto.Inode{}, err
	}
	return out.Inode, nil
}

// draw is a number in [0, 1) from the process's seeded randomness.
func (s *Server) draw() float64 {
	s.rng.mu.Lock()
	defer s.rng.mu.Unlock()
	return s.rng.r.Float64()
}

func (s *Server) place(spec layout.Spec, sizeHint int64) (layout.Layout, error) {
	l, err := s.placeOnce(spec, sizeHint)
	if err != nil && s.router.multi() && !s.router.leading() && s.router.adoptShared(context.Background()) == nil {
		// The leader's OSD map may be newer than the last one adopted
		// (OSDs registered since, or back up): once more with it.
		l, err = s.placeOnce(spec, sizeHint)
	}
	return l, err
}

func (s *Server) placeOnce(spec layout.Spec, sizeHint int64) (layout.Layout, error) {
	up := s.cluster.upCandidates(s.cfg.Now())
	s.rng.mu.Lock()
	defer s.rng.mu.Unlock()
	l, err := placement.Place(spec, sizeHint, up, s.rng.r)
	return l, placementErr(err)
}

// placementErr is placement's refusal as the wire says it: a cluster
// with too few OSDs up is unavailable, which a client may wait out.
func placementErr(err error) error {
	if errors.Is(err, placement.ErrTooFewOSDs) {
		return wire.Errorf(wire.ErrUnavail, "%v", err)
	}
	return err
}

// create makes a new file, replacing an existing one unless Exclusive; the
// replaced file's objects are deleted once no name refers to it.
func (s *Server) create(ctx context.Context, req mdsproto.CreateReq) (mdsproto.OpenResp, error) {
	if req.Unlinked && req.Handle == 0 {
		return mdsproto.OpenResp{}, wire.Errorf(wire.ErrInvalid, "an unlinked file needs a handle to hold it")
	}
	var rec *inodeRec
	s.ensureInodes(ctx, 1)
	err := s.mutate(ctx, func(tx kv.Txn) error {
		who := whoOf(ctx)
		dir, name, err := resolveParent(tx, who, req.Dir, req.Path)
		if err != nil {
			return err
		}
		if req.Handle != 0 {
			// The handle's lease (and lock) are kept by the owner of the
			// new file's slot, its directory's.
			if err := s.router.needOwner(dir.Ino); err != nil {
				return err
			}
		}
		if err := who.need(dir, permW|permX, req.Path); err != nil {
			return err
		}
		if req.Unlinked {
			// The name is untouched until the commit publishes the file.
		} else if old, ok, err := lookupChild(tx, dir.Ino, name); err != nil {
			return err
		} else if ok {
			if req.Exclusive {
				return wire.Errorf(wire.ErrExists, "%s", req.Path)
			}
			prev, err := getInode(tx, old)
			if err != nil {
				return err
			}
			if prev.Type == mdsproto.TypeDir {
				return wire.Errorf(wire.ErrIsDir, "%s", req.Path)
			}
			if !who.mayUnlink(dir, prev) {
				return wire.Errorf(wire.ErrPerm, "%s: another's file in a sticky directory", req.Path)
			}
			if err := s.dropLink(tx, prev); err != nil {
				return err
			}
		}
		specText := req.Layout
		if specText == "" {
			if specText, err = inheritedSpec(tx, dir, s.cl.DefaultLayout); err != nil {
				return err
			}
		}
		spec, err := specOf(specText)
		if err != nil {
			return err
		}
		l, err := s.place(placement.SmallFileSpec(spec, req.SizeHint), req.SizeHint)
		if err != nil {
			return err
		}
		if rec, err = s.newInode(tx, mdsproto.TypeFile, req.Mode, route.SlotOf(dir.Ino)); err != nil {
			return err
		}
		s.dressFile(rec, dir, who, req.Uid, req.Gid, l)
		policy, err := inheritedSync(tx, dir)
		if err != nil {
			return err
		}
		inheritSync(rec, policy)
		noteOnce(ctx, rec.Inode)
		if req.Unlinked {
			return s.createUnlinked(tx, rec, req.Handle)
		}
		rec.Parent, rec.Name = dir.Ino, name
		return addEntry(tx, dir, name, rec)
	})
	if err != nil {
		return mdsproto.OpenResp{}, err
	}
	// No label yet: a new file has no objects to carry one. Its commit
	// labels them, or the expiry of its writer's lease if it never commits.
	return s.openResp(ctx, rec, true, req.Handle, req.Session)
}

// dressFile gives rec, a new file in dir placed as l, its owner (who's
// choice of uid and gid, as far as who may), the directory's group where
// that is set-group-ID, its layout and its data key.
func (s *Server) dressFile(rec, dir *inodeRec, who *caller, uid, gid uint32, l layout.Layout) {
	rec.Uid, rec.Gid = who.owner(uid, gid)
	inheritGroup(dir, rec)
	rec.Layout = toWire(l)
	s.fkeys.sealNew(rec, l.Spec)
}

// createUnlinked stores a new file as an orphan held by the handle's
// lease, taken first so the reaper never sees it unheld. (A transaction
// retried with another ino leaves a lease on nothing, which runs out.)
func (s *Server) createUnlinked(tx kv.Txn, rec *inodeRec, handle uint64) error {
	if _, err := s.leases.renew(rec.Ino, handle, true, s.cfg.Now(), s.cfg.WriterLease, false); err != nil {
		return err
	}
	rec.Nlink, rec.Unnamed = 0, true
	if err := putInode(tx, rec); err != nil {
		return err
	}
	return tx.Put(orphanKey(rec.Ino), nil)
}

// publish names the unlinked file rec (stored by the caller) at p,
// replacing what the name held unless p.Exclusive. A retried publish
// that finds the name already on rec succeeds.
func (s *Server) publish(tx kv.Txn, who *caller, rec *inodeRec, p *mdsproto.Publish) error {
	if !rec.Unnamed {
		// Published already (a retried commit whose reply was lost): what
		// happened to the name since is later history, not undone here.
		return nil
	}
	dir, name, err := resolveParent(tx, who, p.Dir, p.Path)
	if err != nil {
		return err
	}
	if err := who.need(dir, permW|permX, p.Path); err != nil {
		return err
	}
	old, taken, err := lookupChild(tx, dir.Ino, name)
	if err != nil {
		return err
	}
	if taken && old == rec.Ino {
		return nil
	}
	if taken {
		if p.Exclusive {
			return wire.Errorf(wire.ErrExists, "%s", p.Path)
		}
		prev, err := getInode(tx, old)
		if err != nil {
			return err
		}
		if prev.Type == mdsproto.TypeDir {
			return wire.Errorf(wire.ErrIsDir, "%s", p.Path)
		}
		if !who.mayUnlink(dir, prev) {
			return wire.Errorf(wire.ErrPerm, "%s: another's file in a sticky directory", p.Path)
		}
		if err := s.dropLink(tx, prev); err != nil {
			return err
		}
	}
	if err := tx.Delete(orphanKey(rec.Ino)); err != nil {
		return err
	}
	rec.Nlink, rec.Parent, rec.Name, rec.Unnamed = 1, dir.Ino, name, false
	if err := touchDir(tx, dir, rec.CtimeNs); err != nil {
		return err
	}
	return link(tx, dir, name, rec)
}

// openResp issues the capability and, for a handle, its lease.
func (s *Server) openResp(ctx context.Context, rec *inodeRec, write bool, handle, session uint64) (mdsproto.OpenResp, error) {
	key, err := s.fkeys.dataKeyFor(ctx, rec)
	if err != nil {
		return mdsproto.OpenResp{}, err
	}
	rights := capability.Read
	if write {
		rights |= capability.Write
	}
	now := s.cfg.Now()
	c := s.keys.ring.Issue(rec.Ino, rights, rec.Layout.Version, now.Add(s.cfg.CapTTL))
	out := mdsproto.OpenResp{Inode: rec.Inode, Cap: c.Encode(), Endpoints: s.cluster.endpoints(rec.Layout.OSDs, now), OwnDirty: ownDirty(rec, handle),
		DataKey: key, Sync: string(rec.Xattrs[mdsproto.SyncXattr])}
	if handle != 0 {
		// A refused lease (the table is full) only means this handle is
		// not counted as open; the open itself goes ahead.
		r, _ := s.leases.renew(rec.Ino, handle, write, now, s.cfg.WriterLease, false)
		out.LeaseNs = r.LeaseNs
		if write {
			out.Lock = s.locks.openLock(ctx, rec.Ino, session, handle)
		}
	}
	return out, nil
}

func (s *Server) open(ctx context.Context, req mdsproto.OpenReq) (mdsproto.OpenResp, error) {
	var rec *inodeRec
	err := s.kv.View(ctx, func(r kv.Reader) error {
		var err error
		who := whoOf(ctx)
		if req.Ino != 0 {
			if rec, err = getInode(r, req.Ino); err == nil {
				err = who.reachable(r, rec)
			}
		} else {
			rec, err = resolve(r, who, 0, req.Path)
		}
		if err != nil {
			return err
		}
		want := permOpenR
		if req.Write {
			want = permOpenW
		}
		return who.need(rec, want, req.Path)
	})
	if err != nil {
		return mdsproto.OpenResp{}, err
	}
	switch {
	case rec.Type == mdsproto.TypeDir:
		return mdsproto.OpenResp{}, wire.Errorf(wire.ErrIsDir, "%s", req.Path)
	case rec.Type != mdsproto.TypeFile || rec.Layout == nil:
		return mdsproto.OpenResp{}, wire.Errorf(wire.ErrInvalid, "%s is a %s, which holds no data", req.Path, rec.Type)
	}
	if req.Handle != 0 {
		if err := s.router.needOwner(rec.Ino); err != nil {
			return mdsproto.OpenResp{}, err
		}
	}
	if req.Write && s.sights.repairActive(rec.Ino, rec.Repair, s.cfg.Now()) {
		return mdsproto.OpenResp{}, wire.Errorf(wire.ErrBusy, "inode %d is being repaired", rec.Ino)
	}
	return s.openResp(ctx, rec, req.Write, req.Handle, req.Session)
}

// updateInode applies fn to inode ino in one transaction (fn may change
// other records in it too).
func (s *Server) updateInode(ctx context.Context, ino uint64, fn func(kv.Txn, *inodeRec) error) (mdsproto.Inode, error) {
	var out *inodeRec
	err := s.mutate(ctx, func(tx kv.Txn) error {
		rec, err := getInode(tx, ino)
		if err != nil {
			return err
		}
		if err := fn(tx, rec); err != nil {
			return err
		}
		out = rec
		return putInode(tx, rec)
	})
	if err != nil {
		return mdsproto.Inode{}, err
	}
	return out.Inode, nil
}

// commit records a client's close: the file's size and modification time.
func (s *Server) commit(ctx context.Context, req mdsproto.CommitReq) (mdsproto.Inode, error) {
	if req.Size < 0 {
		return mdsproto.Inode{}, wire.Errorf(wire.ErrInvalid, "negative size")
	}
	if err := s.router.needOwner(req.Ino); err != nil {
		return mdsproto.Inode{}, err
	}
	defer s.labels.queue(req.Ino)
	var caughtUp []uint32
	in, err := s.updateInode(ctx, req.Ino, func(tx kv.Txn, rec *inodeRec) error {
		caughtUp = nil // the transaction may run again
		if rec.Type != mdsproto.TypeFile {
			return wire.Errorf(wire.ErrIsDir, "inode %d", req.Ino)
		}
		if req.Handle == 0 || !s.leases.writes(req.Ino, req.Handle, s.cfg.Now()) {
			if err := whoOf(ctx).mayAccess(tx, rec, permWrite); err != nil {
				return err
			}
		}
		if rec.Layout == nil || req.LayoutVersion < rec.Base || req.LayoutVersion > rec.Layout.Version {
			return wire.Errorf(wire.ErrStale, "inode %d: written under layout version %d, file now has another layout", req.Ino, req.LayoutVersion)
		}
		l, err := rec.Layout.Decode()
		if err != nil {
			return err
		}
		if req.Size > l.MaxSize() {
			return wire.Errorf(wire.ErrTooBig, "size %d past the %d bytes layout %s holds", req.Size, l.MaxSize(), l.Spec)
		}
		// A writer that has not seen the latest cut (another handle's
		// truncation) reports extents some of which that cut removed:
		// raised over emptied objects, they would make every reader take
		// them for lost. Like its size, they are not taken.
		staleGen := !req.Cut && req.SizeGen != rec.SizeGen
		commitSize(rec, req, l.Spec.UnitBytes)
		if !staleGen {
			if err := commitExtents(rec, l, req); err != nil {
				return err
			}
		}
		// Dirty marks hold across layout versions: a component keeps its
		// index when a repair moves or rebuilds it, and a repair since the
		// writer's mark rebuilt only what the MDS knew was written, not
		// the writes this commit records.
		var others []uint32
		for _, c := range req.Dirty {
			if !slices.Contains(req.Missed, c) || req.Handle == 0 {
				others = append(others, c)
			}
		}
		if err := addDirty(rec, others); err != nil {
			return err
		}
		if req.Handle != 0 {
			if err := addWriterDirty(rec, req.Missed, req.Handle); err != nil {
				return err
			}
		}
		caughtUp = clearCaughtUp(rec, req.CaughtUp, req.Handle, s.sights.repairActive(rec.Ino, rec.Repair, s.cfg.Now()))
		if req.MtimeNs != 0 {
			rec.MtimeNs = req.MtimeNs
		}
		rec.CtimeNs = s.cfg.Now().UnixNano()
		if req.Publish != nil {
			return s.publish(tx, whoOf(ctx), rec, req.Publish)
		}
		return nil
	})
	if err == nil && len(caughtUp) > 0 {
		s.cfg.Log.Info("components caught up by their writer", "ino", req.Ino, "comps", caughtUp)
	}
	if err == nil && req.Cut {
		s.locks.table.truncated(req.Ino, in.SizeGen)
	} else if err == nil {
		s.locks.table.committed(req.Ino, in.Stored(), in.SizeGen)
	}
	if err == nil && req.Release && req.Handle != 0 {
		// The writer closes: its lease and extent locks end here, as
		// renew's release would end them.
		s.locks.table.dropHandle(req.Ino, req.Handle)
		_, _ = s.leases.renew(req.Ino, req.Handle, true, s.cfg.Now(), s.cfg.WriterLease, true)
	}
	return in, err
}

// commitSize applies a commit's size. Several handles may write one file
// (extlock.go), each with its own view of the size: a commit raises the
// size to what its writer saw, never lowers it, and counts only if that
// view is of the file's size generation (a writer that had not seen a
// truncation by another would otherwise bring the cut size back). A
// truncation (Cut) sets the size and starts a new generation. Sizes are
// stored sizes (a sealed file's ciphertext's).
func commitSize(rec *inodeRec, req mdsproto.CommitReq, unitBytes int64) {
	switch {
	case req.Cut:
		rec.SetStored(req.Size, unitBytes)
		rec.SizeGen++
	case req.SizeGen == rec.SizeGen:
		rec.SetStored(max(rec.Stored(), req.Size), unitBytes)
	}
}

// commitExtents records how far each group's objects now hold written
// data: raised by what the client wrote, replaced where it cut the
// objects, and never past what the committed size can use.
func commitExtents(rec *inodeRec, l layout.Layout, req mdsproto.CommitReq) error {
	if len(req.Extents) == 0 && !req.Cut {
		return nil
	}
	if len(req.Extents) != l.Groups {
		return wire.Errorf(wire.ErrInvalid, "%d extents for %d parity groups", len(req.Extents), l.Groups)
	}
	if len(rec.Extents) != l.Groups || req.Cut {
		rec.Extents = make([]int64, l.Groups)
	}
	w := l.Spec.Width()
	for g, e := range req.Extents {
		if e < 0 || e > layout.MaxObjectBytes {
			return wire.Errorf(wire.ErrInvalid, "extent %d of group %d", e, g)
		}
		rec.Extents[g] = min(max(rec.Extents[g], e), l.ObjectLen(rec.Stored(), g*w))
	}
	return nil
}

// readdirPage is a ReaddirResp as the MDS sends it: each entry encoded
// once, when the page is cut by bytes, and sent as it is.
type readdirPage struct {
	Entries     []mdsproto.Raw `json:"entries"`
	More        bool           `json:"more"`
	XattrFilled bool           `json:"xattr_filled,omitempty"`
}

func (s *Server) readdir(ctx context.Context, req mdsproto.ReaddirReq) (readdirPage, error) {
	ctx = withReader(ctx, req.Session)
	limit := req.Limit
	if limit <= 0 || limit > maxReaddir {
		limit = maxReaddir
	}
	if len(req.Xattr) > maxXattrName {
		return readdirPage{}, wire.Errorf(wire.ErrInvalid, "attribute name of %d bytes exceeds %d", len(req.Xattr), maxXattrName)
	}
	out := readdirPage{XattrFilled: req.Xattr != ""}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		out.Entries, out.More = nil, false // a run again (claim_ops.go) starts over
		who := whoOf(ctx)
		dir, err := resolve(r, who, req.Dir, req.Path)
		if err != nil {
			return err
		}
		if dir.Type != mdsproto.TypeDir {
			return wire.Errorf(wire.ErrNotDir, "%s", req.Path)
		}
		if err := who.need(dir, permR, req.Path); err != nil {
			return err
		}
		prefix := direntPrefix(dir.Ino)
		start := prefix
		if req.After != "" {
			start = append(direntKey(dir.Ino, req.After), 0)
		}
		var inos []uint64
		var names []string
		if err := r.Scan(start, kv.PrefixEnd(prefix), func(k, v []byte) bool {
			if len(names) == limit {
				out.More = true
				return false
			}
			if len(v) == 8 {
				names = append(names, string(k[len(prefix):]))
				inos = append(inos, binary.BigEndian.Uint64(v))
			}
			return true
		}); err != nil {
			return err
		}
		// Entries are encoded into one buffer; each is a piece of it
		// (a piece stays valid when the buffer grows elsewhere).
		buf := make([]byte, 0, 64<<10)
		// Inodes are read a batch at a time (one engine request each on
		// etcd), and no more once the page is full: a batch's answer stays
		// small whatever its inodes carry (extended attributes).
		var recs []*inodeRec
		for i := range inos {
			if i%readdirReadBatch == 0 {
				if recs, err = getInodes(r, inos[i:min(i+readdirReadBatch, len(inos))]); err != nil {
					return err
				}
			}
			rec := recs[i%readdirReadBatch]
			start := len(buf)
			e := mdsproto.DirEntry{Name: names[i], Inode: rec.Inode}
			if req.Xattr != "" && mayXattr(r, who, rec, mdsproto.XattrReq{Op: mdsproto.XattrGet, Name: req.Xattr}) == nil {
				e.Xattr = rec.Xattrs[req.Xattr] // as a getxattr of each entry would answer
			}
			if buf, err = mdsproto.AppendMarshal(buf, e); err != nil {
				return err
			}
			if len(buf) > readdirPageBytes && i > 0 {
				out.More = true // the rest comes with the next page
				break
			}
			out.Entries = append(out.Entries, buf[start:len(buf):len(buf)])
		}
		return nil
	})
	return out, err
}

func (s *Server) remove(ctx context.Context, req mdsproto.PathReq) (struct{}, error) {
	underClaim := req.Session != 0 && req.Dir != 0 && mdsproto.ValidName(req.Path)
	if underClaim {
		ctx = withReader(ctx, req.Session) // the holder's claim lets it through
	}
	return struct{}{}, s.mutate(ctx, func(tx kv.Txn) error {
		if underClaim {
			if err := checkClaimHolder(ctx, tx, req.Dir, req.Session); err != nil {
				return err
			}
		}
		who := whoOf(ctx)
		dir, name, rec, err := resolveEntry(tx, who, req.Dir, req.Path)
		if err != nil {
			return err
		}
		if err := who.need(dir, permW|permX, req.Path); err != nil {
			return err
		}
		if !who.mayUnlink(dir, rec) {
			return wire.Errorf(wire.ErrPerm, "%s: another's entry in a sticky directory", req.Path)
		}
		switch {
		case req.Want == "file" && rec.Type == mdsproto.TypeDir:
			return wire.Errorf(wire.ErrIsDir, "%s is a directory", req.Path)
		case req.Want == "dir" && rec.Type != mdsproto.TypeDir:
			return wire.Errorf(wire.ErrNotDir, "%s is not a directory", req.Path)
		}
		if rec.Type == mdsproto.TypeDir {
			if empty, err := dirEmpty(tx, rec.Ino); err != nil {
				return err
			} else if !empty {
				return wire.Errorf(wire.ErrNotEmpty, "%s", req.Path)
			}
			dir.Nlink--
		}
		if err := tx.Delete(direntKey(dir.Ino, name)); err != nil {
			return err
		}
		if err := touchParent(tx, dir, rec.Type == mdsproto.TypeDir, s.cfg.Now().UnixNano()); err != nil {
			return err
		}
		return s.dropLink(tx, rec)
	})
}

// readdirReadBatch is how many entries' inodes a listing reads at once.
const readdirReadBatch = 64

// readdirPageBytes bounds a page of a listing, well inside the frame
// (wire.MaxMetaBytes): a page is cut by bytes as well as by count, so
// long names and symlink targets make more pages, never a reply too
// large to send.
const readdirPageBytes = 256 << 10
