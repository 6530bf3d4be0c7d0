package fusefs

import (
	"context"
	"math"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

var _ = (fs.NodeAllocater)((*node)(nil))

// Allocate serves fallocate(2). braid reserves no space ahead (objects
// are written on demand, and holes read as zeros), so plain allocation
// only grows the file, unless FALLOC_FL_KEEP_SIZE, and a later write can
// still meet a full OSD. Punching a hole and zeroing a range are one
// (braid.File.PunchHole): the stripes the range covers wholly become
// holes on every OSD, taking no space, and the pieces at its ends are
// written with zeros; zeroing past the end grows the file as allocation
// does. The kernel refuses the other modes (collapse, insert) for FUSE
// before they arrive; anything else unknown is refused here.
func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	const known = unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_ZERO_RANGE
	punch, zero := mode&unix.FALLOC_FL_PUNCH_HOLE != 0, mode&unix.FALLOC_FL_ZERO_RANGE != 0
	keep := mode&unix.FALLOC_FL_KEEP_SIZE != 0
	switch {
	case mode&^known != 0:
		return syscall.EOPNOTSUPP
	case punch && (zero || !keep):
		return syscall.EOPNOTSUPP // as the kernel answers these itself
	}
	h, ok := f.(*handle)
	if !ok || !h.write {
		return syscall.EBADF
	}
	if size == 0 || off > math.MaxInt64 || size > math.MaxInt64-off {
		return syscall.EINVAL
	}
	start, end := int64(off), int64(off+size)
	if _, e := h.file(ctx); e != 0 {
		return e
	}
	if punch || zero {
		if e := errno(h.f.PunchHole(start, end-start)); e != 0 {
			return e
		}
		// Other descriptors see the zeros now, as on a local file
		// system, not only after this one is flushed.
		if e := errno(h.f.Sync()); e != 0 {
			return e
		}
	}
	if !keep && end > h.f.Size() {
		return n.truncate(ctx, end) // holes past the old end read as zeros
	}
	return 0
}
