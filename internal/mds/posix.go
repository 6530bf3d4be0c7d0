package mds

import (
	"context"
	"slices"
	"sort"
	"strings"

	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// The rest of POSIX a mounted file system needs: attributes, hard links,
// symbolic links, extended attributes and statfs.

const (
	maxSymlinkBytes  = 4096  // PATH_MAX
	maxXattrName     = 255   // XATTR_NAME_MAX
	maxXattrValue    = 65536 // XATTR_SIZE_MAX
	maxXattrBytes    = 65536 // all of one inode's attributes together
	maxXattrs        = 1024  // attributes of one inode (a listing of them stays well inside a reply)
	maxLinksPerInode = 65000
)

func (s *Server) setattr(ctx context.Context, req mdsproto.SetattrReq) (mdsproto.Inode, error) {
	if req.Session != 0 {
		ctx = withReader(ctx, req.Session) // the holder of the directory's claim changes it under the claim
	}
	return s.updateInode(ctx, req.Ino, func(tx kv.Txn, rec *inodeRec) error {
		if req.Session != 0 {
			if err := checkClaimHolder(ctx, tx, req.Ino, req.Session); err != nil {
				return err
			}
		}
		if err := mayChange(tx, whoOf(ctx), rec, req); err != nil {
			return err
		}
		if req.Mode != nil {
			rec.Mode = *req.Mode & 0o7777
		}
		if req.Uid != nil {
			rec.Uid = *req.Uid
		}
		if req.Gid != nil {
			rec.Gid = *req.Gid
		}
		if req.AtimeNs != nil {
			rec.AtimeNs = *req.AtimeNs
		}
		if req.MtimeNs != nil {
			rec.MtimeNs = *req.MtimeNs
		}
		if req.KillSuidgid {
			rec.Mode &^= mdsproto.KilledOnWrite(rec.Mode, rec.Gid, req.WriterGroups)
		}
		rec.CtimeNs = s.cfg.Now().UnixNano()
		return nil
	})
}

// inheritGroup gives rec, new in dir, the directory's group if dir is
// set-group-ID (and a new directory the bit too), as Linux does.
func inheritGroup(dir, rec *inodeRec) {
	if dir.Mode&0o2000 == 0 {
		return
	}
	rec.Gid = dir.Gid
	if rec.Type == mdsproto.TypeDir {
		rec.Mode |= 0o2000
	}
}

// mknod makes a FIFO, socket or device node: an inode and a name, no data.
func (s *Server) mknod(ctx context.Context, req mdsproto.MknodReq) (mdsproto.Inode, error) {
	if !mdsproto.IsSpecial(req.Type) {
		return mdsproto.Inode{}, wire.Errorf(wire.ErrInvalid, "mknod of type %q", req.Type)
	}
	if req.Rdev != 0 && req.Type != mdsproto.TypeCharDev && req.Type != mdsproto.TypeBlockDev {
		return mdsproto.Inode{}, wire.Errorf(wire.ErrInvalid, "a %s has no device number", req.Type)
	}
	return s.makeEntry(ctx, req.Dir, req.Name, req.Type, req.Mode, func(rec *inodeRec) {
		rec.Rdev = req.Rdev
		rec.Uid, rec.Gid = whoOf(ctx).owner(req.Uid, req.Gid)
	})
}

// makeEntry makes a new inode of typ with mode, set up by fill, named
// name in directory dirIno: symlinks and special files.
func (s *Server) makeEntry(ctx context.Context, dirIno uint64, name, typ string, mode uint32, fill func(*inodeRec)) (mdsproto.Inode, error) {
	var out mdsproto.Inode
	s.ensureInodes(ctx, 1)
	err := s.mutate(ctx, func(tx kv.Txn) error {
		dir, err := newEntry(tx, whoOf(ctx), dirIno, name)
		if err != nil {
			return err
		}
		rec, err := s.newInode(tx, typ, mode, route.SlotOf(dir.Ino))
		if err != nil {
			return err
		}
		fill(rec)
		inheritGroup(dir, rec)
		rec.Parent, rec.Name = dir.Ino, name
		noteOnce(ctx, rec.Inode)
		out = rec.Inode
		return addEntry(tx, dir, name, rec)
	})
	return out, err
}

// checkName refuses names a directory entry cannot have.
func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return wire.Errorf(wire.ErrInvalid, "name %q", name)
	case len(name) > maxNameBytes:
		return wire.Errorf(wire.ErrNameTooLong, "name of %d bytes", len(name))
	case slices.Contains([]byte(name), '/') || slices.Contains([]byte(name), 0):
		return wire.Errorf(wire.ErrInvalid, "name contains '/' or NUL")
	}
	return nil
}

// newEntry checks that name can be added to directory dirIno and returns
// the directory.
func newEntry(tx kv.Txn, who *caller, dirIno uint64, name string) (*inodeRec, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	dir, err := getInodeNoTimes(tx, dirIno)
	if err != nil {
		return nil, err
	}
	if dir.Type != mdsproto.TypeDir {
		return nil, wire.Errorf(wire.ErrNotDir, "inode %d", dirIno)
	}
	if err := who.searchUp(tx, dir); err != nil {
		return nil, err
	}
	if err := who.need(dir, permW|permX, name); err != nil {
		return nil, err
	}
	if _, taken, err := lookupChild(tx, dir.Ino, name); err != nil || taken {
		if err == nil {
			err = wire.Errorf(wire.ErrExists, "%s", name)
		}
		return nil, err
	}
	return dir, nil
}

// link adds a hard link to a file.
func (s *Server) hardLink(ctx context.Context, req mdsproto.LinkReq) (mdsproto.Inode, error) {
	var out mdsproto.Inode
	err := s.mutate(ctx, func(tx kv.Txn) error {
		who := whoOf(ctx)
		dir, err := newEntry(tx, who, req.Dir, req.Name)
		if err != nil {
			return err
		}
		rec, err := getInode(tx, req.Ino)
		if err != nil {
			return err
		}
		if err := who.reachable(tx, rec); err != nil {
			return err
		}
		if rec.Type == mdsproto.TypeDir {
			return wire.Errorf(wire.ErrPerm, "hard links to directories are not allowed")
		}
		if !who.mayLink(rec) {
			return wire.Errorf(wire.ErrPerm, "link to inode %d: not its owner, and not a plain file the caller may read and write", rec.Ino)
		}
		if rec.Nlink >= maxLinksPerInode {
			return wire.Errorf(wire.ErrInvalid, "inode %d has %d links", rec.Ino, rec.Nlink)
		}
		rec.Nlink++
		rec.CtimeNs = s.cfg.Now().UnixNano()
		noteOnce(ctx, rec.Inode)
		out = rec.Inode
		return addEntry(tx, dir, req.Name, rec)
	})
	return out, err
}

// addEntry stores rec and names it name in dir, whose times change.
// A new subdirectory changes dir's link count too: dir is then stored
// whole; otherwise only its times are written (dirtimes.go).
func addEntry(tx kv.Txn, dir *inodeRec, name string, rec *inodeRec) error {
	if err := putInode(tx, rec); err != nil {
		return err
	}
	if err := touchParent(tx, dir, rec.Type == mdsproto.TypeDir, rec.CtimeNs); err != nil {
		return err
	}
	return link(tx, dir, name, rec)
}

// touchParent sets dir's times to nowNs after a change of its entries:
// stored whole if its link count changed (a subdirectory came or went),
// else only its times.
func touchParent(tx kv.Txn, dir *inodeRec, nlinkChanged bool, nowNs int64) error {
	if nlinkChanged {
		setDirTimes(dir, nowNs)
		return putInode(tx, dir)
	}
	return touchDir(tx, dir, nowNs)
}

func (s *Server) symlink(ctx context.Context, req mdsproto.SymlinkReq) (mdsproto.Inode, error) {
	if req.Target == "" || len(req.Target) > maxSymlinkBytes {
		return mdsproto.Inode{}, wire.Errorf(wire.ErrNameTooLong, "symlink target of %d bytes", len(req.Target))
	}
	return s.makeEntry(ctx, req.Dir, req.Name, mdsproto.TypeSymlink, 0o777, func(rec *inodeRec) {
		rec.Target, rec.Size = req.Target, int64(len(req.Target))
		rec.Uid, rec.Gid = whoOf(ctx).owner(req.Uid, req.Gid)
	})
}

// xattr gets, sets, lists or removes extended attributes. braid.layout is
// the file's layout spec (set only on an empty file) or the directory's
// default for new files.
func (s *Server) xattr(ctx context.Context, req mdsproto.XattrReq) (mdsproto.XattrResp, error) {
	if req.Op != mdsproto.XattrList {
		if req.Name == "" || len(req.Name) > maxXattrName {
			return mdsproto.XattrResp{}, wire.Errorf(wire.ErrInvalid, "attribute name of %d bytes", len(req.Name))
		}
	}
	if req.Name == mdsproto.LayoutXattr {
		return s.layoutXattr(ctx, req)
	}
	if req.Name == mdsproto.SyncXattr && req.Op == mdsproto.XattrSet && !mdsproto.ValidSyncPolicy(string(req.Value)) {
		return mdsproto.XattrResp{}, wire.Errorf(wire.ErrInvalid, "%s is %q or %q, not %q", mdsproto.SyncXattr,
			mdsproto.SyncCluster, mdsproto.SyncAsync, req.Value)
	}
	if len(req.Value) > maxXattrValue {
		return mdsproto.XattrResp{}, wire.Errorf(wire.ErrInvalid, "attribute value of %d bytes", len(req.Value))
	}
	var out mdsproto.XattrResp
	if req.Op == mdsproto.XattrGet || req.Op == mdsproto.XattrList {
		err := s.kv.View(ctx, func(r kv.Reader) error {
			rec, err := getInode(r, req.Ino)
			if err != nil {
				return err
			}
			if err := mayXattr(r, whoOf(ctx), rec, req); err != nil {
				return err
			}
			if req.Op == mdsproto.XattrList {
				for name := range rec.Xattrs {
					if who := whoOf(ctx); who == nil || who.uid == 0 || strings.HasPrefix(name, "user.") {
						out.Names = append(out.Names, name) // others' namespaces are root's to see
					}
				}
				sort.Strings(out.Names)
				if rec.Layout != nil || rec.Type == mdsproto.TypeDir {
					out.Names = append(out.Names, mdsproto.LayoutXattr)
				}
				return nil
			}
			v, ok := rec.Xattrs[req.Name]
			if !ok {
				return wire.Errorf(wire.ErrNoData, "%s", req.Name)
			}
			out.Value = v
			return nil
		})
		return out, err
	}
	_, err := s.updateInode(ctx, req.Ino, func(tx kv.Txn, rec *inodeRec) error {
		if err := mayXattr(tx, whoOf(ctx), rec, req); err != nil {
			return err
		}
		_, exists := rec.Xattrs[req.Name]
		switch req.Op {
		case mdsproto.XattrRemove:
			if !exists {
				return wire.Errorf(wire.ErrNoData, "%s", req.Name)
			}
			delete(rec.Xattrs, req.Name)
		case mdsproto.XattrSet:
			if req.Flags&mdsproto.XattrCreate != 0 && exists {
				return wire.Errorf(wire.ErrExists, "%s", req.Name)
			}
			if req.Flags&mdsproto.XattrReplace != 0 && !exists {
				return wire.Errorf(wire.ErrNoData, "%s", req.Name)
			}
			if !exists && len(rec.Xattrs) >= maxXattrs {
				return wire.Errorf(wire.ErrNoSpace, "inode %d has %d extended attributes", req.Ino, len(rec.Xattrs))
			}
			total := len(req.Name) + len(req.Value)
			for k, v := range rec.Xattrs {
				if k != req.Name {
					total += len(k) + len(v)
				}
			}
			if total > maxXattrBytes {
				return wire.Errorf(wire.ErrNoSpace, "extended attributes of inode %d would take %d bytes", req.Ino, total)
			}
			if rec.Xattrs == nil {
				rec.Xattrs = map[string][]byte{}
			}
			rec.Xattrs[req.Name] = append([]byte{}, req.Value...)
		default:
			return wire.Errorf(wire.ErrInvalid, "xattr op %q", req.Op)
		}
		rec.CtimeNs = s.cfg.Now().UnixNano()
		return nil
	})
	return out, err
}

func (s *Server) layoutXattr(ctx context.Context, req mdsproto.XattrReq) (mdsproto.XattrResp, error) {
	switch req.Op {
	case mdsproto.XattrGet:
		l, err := s.getLayout(ctx, mdsproto.PathReq{Dir: req.Ino})
		return mdsproto.XattrResp{Value: []byte(l.Spec)}, err
	case mdsproto.XattrSet:
		_, err := s.setLayout(ctx, mdsproto.SetLayoutReq{Dir: req.Ino, Spec: string(req.Value)})
		return mdsproto.XattrResp{}, err
	case mdsproto.XattrRemove:
		return mdsproto.XattrResp{}, wire.Errorf(wire.ErrPerm, "%s cannot be removed", mdsproto.LayoutXattr)
	}
	return mdsproto.XattrResp{}, wire.Errorf(wire.ErrInvalid, "xattr op %q", req.Op)
}

func (s *Server) statfs(ctx context.Context) (mdsproto.StatfsResp, error) {
	var out mdsproto.StatfsResp
	out.CapacityBytes, _, out.FreeBytes = mdsproto.SumCapacity(s.cluster.status(s.cfg.Now()))
	err := s.kv.View(ctx, func(r kv.Reader) error {
		b, err := r.Get(keyNextIno)
		if len(b) == 8 {
			out.Inodes = int64(beUint64(b))
		}
		return err
	})
	return out, err
}
