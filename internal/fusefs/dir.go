package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/braidfs/braid"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// OpendirHandle opens a directory listing. Its offsets are cookies that
// stand for "after this name" (the MDS lists in name order), so a listing
// resumed at an offset — after seekdir, or after entries were added or
// removed meanwhile — returns every remaining entry exactly once.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	parent := n.ino // the root is its own parent
	if _, p := n.Parent(); p != nil {
		parent = p.StableAttr().Ino
	}
	return &dirHandle{n: n, parent: parent, more: true, cookies: map[uint64]dirPos{}}, 0, 0
}

// dirPos is where a listing stands: past the dot entries, after a name.
type dirPos struct {
	dots  int // "." and ".." returned so far
	after string
}

type dirHandle struct {
	n      *node
	parent uint64

	mu      sync.Mutex
	pos     dirPos
	page    []braid.DirEntry // fetched, not yet returned
	more    bool
	last    *braid.DirEntry // the entry returned last, for READDIRPLUS
	cookie  uint64
	cookies map[uint64]dirPos // position after each returned entry
}

var (
	_ = (fs.FileFsyncdirer)((*dirHandle)(nil))
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileLookuper)((*dirHandle)(nil))
)

// Fsyncdir makes the directory's names durable: those this mount
// answered under a write-back claim are sent to the MDS first.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return errno(d.n.m.cl.SyncDir(d.n.m.opCtx(ctx), d.n.ino))
}

// maxDirCookies bounds the positions one open listing remembers.
const maxDirCookies = 1 << 20

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	ctx = d.n.m.opCtx(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	var e fuse.DirEntry
	switch d.pos.dots {
	case 0:
		e = fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: d.n.ino}
		d.pos.dots, d.last = 1, nil
	case 1:
		e = fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: d.parent}
		d.pos.dots, d.last = 2, nil
	default:
		if len(d.page) == 0 && d.more {
			entries, more, err := d.n.m.cl.ReadDirAt(ctx, d.n.ino, d.pos.after, readdirPage)
			if err != nil {
				return nil, errno(err)
			}
			d.page, d.more = entries, more && len(entries) > 0
		}
		if len(d.page) == 0 {
			return nil, 0 // end of the directory
		}
		be := d.page[0]
		d.page = d.page[1:]
		d.pos.after, d.last = be.Name, &be
		e = fuse.DirEntry{Name: be.Name, Mode: typeBits(be.Inode.Type), Ino: be.Inode.Ino}
	}
	d.cookie++
	if len(d.cookies) < maxDirCookies {
		d.cookies[d.cookie] = d.pos
	}
	e.Off = d.cookie
	return &e, 0
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	pos, ok := d.cookies[off]
	if off != 0 && !ok {
		return syscall.EINVAL
	}
	d.pos, d.page, d.more, d.last = pos, nil, true, nil // off 0: the zero position, the start
	return 0
}

// Lookup answers READDIRPLUS from the entry just listed: the MDS sent its
// attributes along, so no lookup round trip per entry.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = d.n.m.opCtx(ctx)
	d.mu.Lock()
	last := d.last
	d.mu.Unlock()
	// The kernel notes a READDIRPLUS entry's epoch when it reads the
	// reply, not before it asked (unlike a lookup's): a move between the
	// two would not drop the name, so these names are not kept.
	if last == nil || last.Name != name {
		return d.n.lookup(ctx, name, out, false)
	}
	return d.n.childNamed(ctx, name, last.Inode, out, false), 0
}
