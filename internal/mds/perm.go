package mds

// POSIX permissions, checked by the MDS with the identity each request
// acts as (mdsproto.Caller), so that no client, command line or raw,
// reaches what a mount would refuse. The rules are Linux's
// generic_permission: owner, then group (primary or supplementary), then
// others; root passes every check but execute on a file with no execute
// bit. A principal that may not act as the identity a request names is
// refused; one that names root without being allowed it acts as nobody
// (root squash).
//
// What a request needs:
//
//	any path                 search (x) on every directory it walks
//	readdir                  read (r) on the directory
//	create, mkdir, mknod,
//	symlink, link            write and search (wx) on the parent; a link
//	                         also to own the file, or read and write it
//	                         if it is a regular file neither setuid nor
//	                         setgid-executable (protected_hardlinks)
//	remove, rename           wx on each parent; in a sticky directory, to
//	                         own the entry or the directory; a directory
//	                         moved to another parent needs w on itself
//	open                     r to read, rw to write or truncate (a mount:
//	                         r or x to read, as exec opens, w to write)
//	chmod, times set         to own the inode
//	chown                    root; the owner may change the group to one
//	                         of its own
//	set layout               to own the directory
//
// Requests that name a directory by inode (a mount's) are checked from
// that directory: for a principal that may act as anyone (a mount, whose
// kernel checked the walk to it) from there on, and for one limited to
// its own identities also on every directory above it, so an inode number
// is no way around a closed directory.

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Permission bits asked for.
const (
	permX = mdsproto.MayExec
	permW = mdsproto.MayWrite
	permR = mdsproto.MayRead
)

const nobody = 65534

// caller is the identity a request acts as; nil is the MDS's own work
// and the cluster's servers, which no permission limits.
type caller struct {
	uid, gid uint32
	groups   []uint32
	// limited: the principal may act only as identities it was issued
	// (inode-addressed requests are checked up the tree too).
	limited bool
}

type callerKey struct{}

// whoOf is the caller of the request in ctx (nil: unchecked).
func whoOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// actAs notes in ctx who the request in meta acts as, as far as its
// principal may.
func (s *Server) actAs(ctx context.Context, meta []byte) (context.Context, error) {
	p, authenticated := principal(ctx)
	if authenticated && (p.Role == auth.RoleMDS || p.Role == auth.RoleOSD || p.Role == auth.RoleHealer) {
		return ctx, nil // the cluster's own servers
	}
	var as *mdsproto.Caller
	if len(meta) > 0 {
		var err error
		if as, err = mdsproto.CallerOf(meta); err != nil {
			return ctx, err
		}
	}
	if as == nil {
		if !authenticated || p.AnyID {
			return ctx, nil // an older client, or one that may be root anyway
		}
		as = &mdsproto.Caller{Uid: first(p.UIDs, nobody), Gid: first(p.GIDs, nobody)}
	}
	c := &caller{uid: as.Uid, gid: as.Gid, groups: as.Groups}
	if authenticated && !p.AnyID {
		c.limited = true
		if !p.MayAct(as.Uid, as.Gid, as.Groups) {
			if as.Uid != 0 {
				return ctx, wire.Errorf(wire.ErrDenied, "%s may not act as uid %d gid %d groups %v", p, as.Uid, as.Gid, as.Groups)
			}
			c = &caller{uid: nobody, gid: nobody, limited: true} // root squashed
		}
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

func first(ids []uint32, or uint32) uint32 {
	if len(ids) == 0 {
		return or
	}
	return ids[0]
}

func (c *caller) inGroup(gid uint32) bool {
	return c.gid == gid || slices.Contains(c.groups, gid)
}

// may reports whether c may do want (permR|permW|permX, or permOpenR or
// permOpenW) to rec.
func (c *caller) may(rec *inodeRec, want uint32) bool {
	if c == nil {
		return true
	}
	switch want {
	case permOpenR:
		return c.may(rec, permR) || !c.limited && c.may(rec, permX)
	case permOpenW:
		if c.limited {
			return c.may(rec, permR|permW)
		}
		return c.may(rec, permW)
	}
	return mdsproto.Caller{Uid: c.uid, Gid: c.gid, Groups: c.groups}.Permits(rec.Type, rec.Mode, rec.Uid, rec.Gid, want)
}

// need refuses unless c may do want to rec.
func (c *caller) need(rec *inodeRec, want uint32, what string) error {
	if c.may(rec, want) {
		return nil
	}
	return wire.Errorf(wire.ErrDenied, "%s: permission denied", what)
}

// owns reports whether c owns rec (or is root).
func (c *caller) owns(rec *inodeRec) bool {
	return c == nil || c.uid == 0 || c.uid == rec.Uid
}

// mayLink is Linux's protected_hardlinks rule, which a mount's kernel
// applies before the MDS sees the link: the caller owns rec (or is
// root), or rec is a regular file, neither setuid nor setgid-executable,
// that the caller may read and write. Without it a link puts another's
// file where its owner cannot remove it (a sticky directory) and keeps
// it alive past its owner's unlink.
func (c *caller) mayLink(rec *inodeRec) bool {
	if c.owns(rec) {
		return true
	}
	if rec.Type != mdsproto.TypeFile || rec.Mode&0o4000 != 0 || rec.Mode&0o2010 == 0o2010 {
		return false
	}
	return c.may(rec, permR|permW)
}

// mayUnlink is the sticky-directory rule: in a sticky directory only the
// entry's owner, the directory's owner or root removes or renames it.
func (c *caller) mayUnlink(dir, entry *inodeRec) bool {
	return dir.Mode&0o1000 == 0 || c.owns(dir) || c.owns(entry)
}

// searchUp checks search permission on dir's ancestors, for a limited
// caller that names dir by inode.
func (c *caller) searchUp(r kv.Reader, dir *inodeRec) error {
	if c == nil || !c.limited || c.uid == 0 {
		return nil
	}
	cur := dir
	for i := 0; i < maxDepth && cur.Ino != rootIno && cur.Parent != 0; i++ {
		parent, err := getInodeNoTimes(r, cur.Parent)
		if err != nil {
			return err
		}
		if err := c.need(parent, permX, "a directory above"); err != nil {
			return err
		}
		cur = parent
	}
	return nil
}

// reachable checks, for a limited caller naming rec by inode, search
// permission on the directories above it (its first parent's chain).
func (c *caller) reachable(r kv.Reader, rec *inodeRec) error {
	if c == nil || !c.limited || c.uid == 0 || rec.Parent == 0 || rec.Ino == rootIno {
		return nil
	}
	parent, err := getInodeNoTimes(r, rec.Parent)
	if err != nil {
		return err
	}
	if err := c.need(parent, permX, "a directory above"); err != nil {
		return err
	}
	return c.searchUp(r, parent)
}

// mayRename checks a rename's permissions: write and search on both
// directories, the sticky rule for the entry moved and the one it
// replaces, and write on a directory that changes parent (its ".."
// changes).
func mayRename(r kv.Reader, c *caller, srcDir, src, dstDir *inodeRec, dstName, to string) error {
	if c == nil {
		return nil
	}
	for _, d := range []*inodeRec{srcDir, dstDir} {
		if err := c.need(d, permW|permX, to); err != nil {
			return err
		}
	}
	if !c.mayUnlink(srcDir, src) {
		return wire.Errorf(wire.ErrPerm, "%s: another's entry in a sticky directory", to)
	}
	if old, taken, err := lookupChild(r, dstDir.Ino, dstName); err != nil {
		return err
	} else if taken && old != src.Ino {
		target, err := getInode(r, old)
		if err != nil {
			return err
		}
		if !c.mayUnlink(dstDir, target) {
			return wire.Errorf(wire.ErrPerm, "%s: another's entry in a sticky directory", to)
		}
	}
	if src.Type == mdsproto.TypeDir && srcDir.Ino != dstDir.Ino {
		return c.need(src, permW, to)
	}
	return nil
}

// mayChange checks a setattr: the mode and times are the owner's to set
// (times also anyone's who may write, as "now" is), the owner only the
// root's, and the group the owner's to change to one of its own.
func mayChange(r kv.Reader, c *caller, rec *inodeRec, req mdsproto.SetattrReq) error {
	if c == nil || c.uid == 0 {
		return nil
	}
	if err := c.reachable(r, rec); err != nil {
		return err
	}
	switch {
	case req.Mode != nil && !c.owns(rec):
		return wire.Errorf(wire.ErrPerm, "inode %d: only its owner changes its mode", rec.Ino)
	case req.Uid != nil && (*req.Uid != rec.Uid || !c.owns(rec)):
		return wire.Errorf(wire.ErrPerm, "inode %d: only root changes its owner", rec.Ino)
	case req.Gid != nil && (!c.owns(rec) || *req.Gid != rec.Gid && !c.inGroup(*req.Gid)):
		return wire.Errorf(wire.ErrPerm, "inode %d: only its owner changes its group, to one of the owner's", rec.Ino)
	case req.KillSuidgid && !c.limited && req.AtimeNs == nil && req.MtimeNs == nil:
		// A mount asks it after a write its kernel let through, perhaps
		// by a descriptor opened before a chmod took write away.
	case (req.AtimeNs != nil || req.MtimeNs != nil || req.KillSuidgid) && !c.owns(rec) && !c.may(rec, permW):
		return wire.Errorf(wire.ErrPerm, "inode %d: only its owner or a writer sets its times", rec.Ino)
	}
	return nil
}

// mayXattr checks an extended attribute's access, as Linux does: user.*
// as the inode's data (read to get, write to set or remove); trusted.*
// root's alone; security.* and system.* readable by anyone who reaches
// the inode (ls asks for them) and set by root; listing needs only to
// reach the inode.
func mayXattr(r kv.Reader, c *caller, rec *inodeRec, req mdsproto.XattrReq) error {
	if c == nil || c.uid == 0 {
		return nil
	}
	if err := c.reachable(r, rec); err != nil {
		return err
	}
	user := strings.HasPrefix(req.Name, "user.")
	switch {
	case req.Op == mdsproto.XattrList:
		return nil
	case strings.HasPrefix(req.Name, "trusted."):
		return wire.Errorf(wire.ErrPerm, "%s: only root reaches this namespace", req.Name)
	case req.Op == mdsproto.XattrGet && !user:
		return nil
	case req.Op == mdsproto.XattrGet:
		return c.need(rec, permR, req.Name)
	case req.Name == mdsproto.SyncXattr:
		if c.uid != rec.Uid {
			return wire.Errorf(wire.ErrPerm, "%s: only the owner sets it", req.Name)
		}
		return nil
	case !user:
		return wire.Errorf(wire.ErrPerm, "%s: only root sets this namespace", req.Name)
	}
	return c.need(rec, permW, req.Name)
}

// owner is who owns what c makes, asked to be uid and gid: as asked for
// root (a mount, acting for its kernel's caller, names that caller), and
// otherwise c itself, in the group asked if c is in it.
func (c *caller) owner(uid, gid uint32) (uint32, uint32) {
	if c == nil || c.uid == 0 {
		return uid, gid
	}
	if !c.inGroup(gid) {
		gid = c.gid
	}
	return c.uid, gid
}

// mayAccess checks that c may reach rec and do want to it.
func (c *caller) mayAccess(r kv.Reader, rec *inodeRec, want uint32) error {
	if c == nil {
		return nil
	}
	if err := c.reachable(r, rec); err != nil {
		return err
	}
	return c.need(rec, want, "inode "+strconv.FormatUint(rec.Ino, 10))
}

// mayIno is mayAccess for the request's caller and inode ino, read in a
// transaction of its own: for what a reader or writer asks by inode
// (leases, locks, dirty marks), what opening the file would have needed.
func (s *Server) mayIno(ctx context.Context, ino uint64, want uint32) error {
	who := whoOf(ctx)
	if who == nil {
		return nil
	}
	return s.kv.View(ctx, func(r kv.Reader) error {
		rec, err := getInode(r, ino)
		if err != nil {
			return err
		}
		return who.mayAccess(r, rec, want)
	})
}

// What opening a file needs. A capability to write also reads (a writer
// reads back partial stripes), so a principal limited to its own
// identities needs read and write permission to write. A principal that
// may act as anyone (a mount) is trusted as a kernel is: its kernel
// checked the open's exact mode (write-only, or execute-only for exec),
// so the MDS asks only write to write, and read or execute to read.
const (
	permOpenR uint32 = 1 << 8
	permOpenW uint32 = 1 << 9
	permWrite        = permOpenW
)

// mayWriteHandle is mayIno for writing, passed at once by a handle holding a
// writer's lease on ino: a file opened for writing stays writable by its
// handle whatever its mode becomes (as POSIX keeps an open descriptor's
// access), and leases are taken only by opens and renewals that passed
// the check.
func (s *Server) mayWriteHandle(ctx context.Context, ino, handle uint64) error {
	if whoOf(ctx) == nil || (handle != 0 && s.leases.writes(ino, handle, s.cfg.Now())) {
		return nil
	}
	return s.mayIno(ctx, ino, permWrite)
}
