package fusefs

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/braidfs/braid"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// POSIX beyond files and directories: inode types (FIFOs, sockets,
// device nodes, symlinks) and the set-ID bits a write clears.

// fileTypes maps braid's inode types to the kernel's.
var fileTypes = map[string]uint32{
	braid.TypeFile:     syscall.S_IFREG,
	braid.TypeDir:      syscall.S_IFDIR,
	braid.TypeSymlink:  syscall.S_IFLNK,
	braid.TypeFIFO:     syscall.S_IFIFO,
	braid.TypeSocket:   syscall.S_IFSOCK,
	braid.TypeCharDev:  syscall.S_IFCHR,
	braid.TypeBlockDev: syscall.S_IFBLK,
}

func typeBits(t string) uint32 {
	if bits, ok := fileTypes[t]; ok {
		return bits
	}
	return syscall.S_IFREG
}

// typeOf is the braid type of the kernel's type bits in mode.
func typeOf(mode uint32) (string, bool) {
	for t, bits := range fileTypes {
		if mode&syscall.S_IFMT == bits {
			return t, true
		}
	}
	return "", false
}

// saw notes the attributes a reply carried.
func (n *node) saw(a braid.Attr) {
	n.modeGid.Store(uint64(a.Gid)<<32 | uint64(a.Mode))
}

// dropPrivileges clears set-user-ID and set-group-ID before a write by a
// caller without CAP_FSETID, as Linux does (should_remove_suid). The kernel
// leaves it to the file system for direct-I/O writes, and braid's writers
// use direct I/O. Caller identity stands in for the capability: uid 0 keeps
// the bits (a root process that dropped CAP_FSETID is the one case missed).
func (n *node) dropPrivileges(ctx context.Context) syscall.Errno {
	mg := n.modeGid.Load()
	mode, gid := uint32(mg), uint32(mg>>32)
	if uid, _ := owner(ctx); uid == 0 || mode&0o6000 == 0 {
		return 0
	}
	var groups []uint32
	if mode&0o2010 == 0o2000 {
		groups = n.m.groupsOf(ctx) // only then does the group matter
	}
	if braid.KilledOnWrite(mode, gid, groups) == 0 {
		return 0 // a group member's write keeps set-group-ID without group execute
	}
	a, err := n.m.cl.SetAttr(n.m.opCtx(ctx), braid.SetAttrRequest{Ino: n.ino, KillSuidgid: true, WriterGroups: groups})
	if err != nil {
		return errno(err)
	}
	n.saw(a)
	// The kernel still holds the old mode; a negative offset drops only
	// the attributes, never pages under this write.
	_ = n.NotifyContent(-1, 0)
	return 0
}

// callerGroups lists the calling process's group and supplementary groups
// (FUSE carries only the first; the rest are read from /proc).
func callerGroups(ctx context.Context) []uint32 {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	groups := []uint32{c.Gid}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.Pid))
	if err != nil {
		return groups // the process is gone: its supplementary groups no longer matter
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, f := range strings.Fields(rest) {
				if g, err := strconv.ParseUint(f, 10, 32); err == nil {
					groups = append(groups, uint32(g))
				}
			}
		}
	}
	return groups
}

func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	typ, ok := typeOf(mode)
	if typ == braid.TypeFile {
		return n.mknodFile(ctx, name, mode, out)
	}
	if !ok || !braid.IsSpecial(typ) {
		return nil, syscall.EINVAL
	}
	if typ != braid.TypeCharDev && typ != braid.TypeBlockDev {
		dev = 0
	}
	uid, gid := owner(ctx)
	// dev is the kernel's 32-bit encoding, which is also st_rdev's for
	// every number it can carry.
	a, err := n.m.cl.MknodAt(ctx, n.ino, name, typ, mode&0o7777, uint64(dev), uid, gid)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, a, out), 0
}

// mknodFile makes an empty regular file (mknod S_IFREG): created and
// closed at once.
func (n *node) mknodFile(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	uid, gid := owner(ctx)
	f, err := n.m.cl.CreateAt(ctx, n.ino, name, braid.CreateOptions{Mode: mode & 0o7777, SizeHint: 0, Exclusive: true, Uid: uid, Gid: gid})
	if err != nil {
		return nil, errno(err)
	}
	a := f.Attr()
	if err := f.Close(); err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, a, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	uid, gid := owner(ctx)
	a, err := n.m.cl.Symlink(ctx, n.ino, name, target, uid, gid)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, a, out), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	a, err := n.m.cl.GetAttr(ctx, n.ino)
	if err != nil {
		return nil, errno(err)
	}
	if a.Type != braid.TypeSymlink {
		return nil, syscall.EINVAL
	}
	return []byte(a.Target), 0
}
