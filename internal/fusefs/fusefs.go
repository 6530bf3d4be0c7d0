// Package fusefs mounts a braid cluster as a POSIX file system through
// FUSE (github.com/hanwen/go-fuse/v2), on top of the client library.
// Every kernel inode is a braid inode: operations name entries by their
// directory's ino and a name, so a rename elsewhere cannot redirect them.
//
// Consistency is close-to-open (as NFS): close and fsync make a file's
// bytes durable on every OSD and its size visible at the MDS; an open
// fetches fresh attributes and drops cached pages. Names and attributes
// are cached under the MDS's callbacks (Options.CacheMetadata): the mount
// answers lookups and getattr from memory for as long as the MDS lets it,
// and the MDS tells it of every change before committing it, so a change
// made through another mount is seen at once. The kernel revalidates
// every name with the mount (the answer comes from memory) and keeps
// attributes for the rest of the cache's lease; a change drops them
// (FUSE_NOTIFY_INVAL_INODE). Names are not invalidated in the kernel:
// that takes the directory's lock, which an operation of this mount may
// hold while it waits for another mount's acknowledgement.
package fusefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/braidfs/braid"
)

// Options tune a mount.
type Options struct {
	// CacheMetadata caches names and attributes as long as the MDS
	// keeps them coherent; without it the kernel caches them for
	// EntryTimeout and AttrTimeout, and a change made elsewhere is seen
	// that late.
	CacheMetadata bool
	EntryTimeout  time.Duration // how long the kernel caches a name → inode, without CacheMetadata
	AttrTimeout   time.Duration // how long the kernel caches attributes, without CacheMetadata
	Debug         bool          // log every FUSE request
	Name          string        // shown as the file system's source (df, mount)
	// WriteBackNames (with CacheMetadata) answers creates of empty files
	// and unlinks in directories this mount made from memory, sent to
	// the MDS in batches and durable at fsync of the directory or file
	// (braid.Client.EnableWriteBackNames).
	WriteBackNames bool
}

// DefaultOptions suit interactive use and close-to-open consistency.
var DefaultOptions = Options{CacheMetadata: true, WriteBackNames: true, EntryTimeout: time.Second, AttrTimeout: time.Second, Name: "braid"}

const (
	maxWriteBytes = 1 << 20 // largest FUSE read/write request
	readdirPage   = 1000    // entries fetched from the MDS at a time
	blockBytes    = 4096    // statfs block size
)

// Mount mounts the cluster behind cl at dir and serves it until the
// returned server is unmounted.
func Mount(cl *braid.Client, dir string, o Options) (*Server, error) {
	m := &mount{cl: cl, opts: o}
	root := &node{m: m, ino: braid.RootIno}
	neg := time.Duration(0)
	if o.CacheMetadata {
		o.EntryTimeout, o.AttrTimeout = 0, 0
		m.opts = o
		if o.WriteBackNames {
			cl.EnableWriteBackNames()
		}
		cl.CacheMetadata(func(ino uint64, self bool) {
			e := m.epochs.Load()
			if ino == 0 { // everything dropped
				if e != nil {
					e.doubt()
				}
				return
			}
			if s := m.srv.Load(); s != nil {
				_ = s.InodeNotify(ino, -1, 0) // attributes only; ENOENT if the kernel has forgotten it
			}
			// A change this mount asked for is one its kernel made
			// and mirrors in its own names; a change by anyone else
			// meanwhile is reported apart (the MDS keeps this client
			// registered while its own change runs).
			if e != nil {
				e.changed(ino, self)
			}
		})
	}
	mo := fuse.MountOptions{
		DirectMount:  true,
		FsName:       o.Name,
		Name:         "braid",
		MaxWrite:     maxWriteBytes,
		MaxReadAhead: maxWriteBytes,
		AllowOther:   true,
		Options:      []string{"default_permissions"},
		Debug:        o.Debug,
		// Writers use direct I/O; programs may still mmap those files.
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		// Replies are built in memory: splicing them only adds a pipe
		// too small for a 1 MiB read and a log line per attempt.
		DisableSplice: true,
	}
	out := &Server{m: m}
	at := dir
	fd := -1
	if o.CacheMetadata {
		// Mount /dev/fuse here, so the kernel's names can be dropped
		// (epoch.go); without root, go-fuse mounts and names are not kept.
		if fd, _ = mountFuse(dir, &mo); fd >= 0 { // go-fuse owns fd from here
			at, mo.DirectMount, out.dir = fmt.Sprintf("/dev/fd/%d", fd), false, dir
		}
	}
	srv, err := fs.Mount(at, root, &fs.Options{
		// Modes are braid's, 0 included (go-fuse otherwise shows 0 as 0644).
		NullPermissions: true,
		EntryTimeout:    &o.EntryTimeout,
		AttrTimeout:     &o.AttrTimeout,
		NegativeTimeout: &neg,
		// Kernel node ids are braid inode numbers (never reused), so a
		// change the MDS reports by inode is invalidated by number.
		ExternalNodeID: true,
		RootStableAttr: &fs.StableAttr{Ino: braid.RootIno},
		MountOptions:   mo,
	})
	if err != nil {
		if out.dir != "" {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		return nil, err
	}
	out.Server = srv
	m.srv.Store(srv)
	if out.dir != "" {
		// What go-fuse does after mounting, and skips for /dev/fd/N:
		// have the kernel ask FUSE_POLL once and be told ENOSYS. Without
		// it the kernel asks at every epoll_ctl of a file here, and a
		// program that serves its own mount (the tests) can deadlock on
		// one: Go puts every file it opens in its epoll set.
		pollHack(dir)
	}
	if fd >= 0 {
		if e, err := newEpochs(fd); err == nil {
			out.epochs = e
			m.epochs.Store(e)
		}
	}
	raiseReadahead(dir)
	// Direct I/O for writers only where the kernel still lets programs
	// mmap such files (Linux 6.6 and later).
	m.directWrites.Store(srv.KernelSettings().Flags64()&fuse.CAP_DIRECT_IO_ALLOW_MMAP != 0)
	return out, nil
}

// Lookups reports how many name lookups the kernel has asked the mount.
func (s *Server) Lookups() uint64 { return s.m.lookups.Load() }

// KeepsNames reports whether the kernel keeps names (dentries) of this
// mount for the cache's lease (epoch.go).
func (s *Server) KeepsNames() bool { return s.epochs != nil }

// readaheadKB is the kernel read-ahead braid asks for on its mounts: the
// kernel offers FUSE file systems 128 KiB, too little to keep a striped
// file's OSDs busy.
const readaheadKB = 4096

// raiseReadahead sets the mount's backing-device read-ahead, best effort
// (it needs root; without it reads still work, with less read-ahead).
func raiseReadahead(dir string) {
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) != nil {
		return
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	_ = os.WriteFile(filepath.Join("/sys/class/bdi", dev, "read_ahead_kb"), []byte(strconv.Itoa(readaheadKB)), 0o644)
}

type mount struct {
	cl           *braid.Client
	opts         Options
	directWrites atomic.Bool // write handles bypass the page cache
	srv          atomic.Pointer[fuse.Server]
	epochs       atomic.Pointer[epochs] // nil: the kernel keeps no names
	lookups      atomic.Uint64          // FUSE LOOKUPs answered

	// writing are the nodes holding a writer (writer.go), by inode: a
	// lookup answers with their size. go-fuse hands a lookup a new node
	// even for an inode it knows, so the node cannot be found from there.
	wmu     sync.Mutex
	writing map[uint64]*node
	filling map[uint64]*node // nodes whose handles keep bytes for their close (whole.go)

	callers callerCache // who requests act as (callers.go)
}

// node is one braid inode in the kernel's tree.
type node struct {
	fs.Inode
	m   *mount
	ino uint64

	// The mount's one writing view of the file (writer.go): every handle
	// open for writing shares it, so they see one size and one set of
	// stripe buffers instead of overwriting each other's stripes.
	openMu     sync.Mutex // serialises opening and closing writer
	mu         sync.Mutex // guards writer and writerRefs
	writer     *braid.File
	writerRefs int
	// deferred are the open handles of a file made under a write-back
	// claim not yet opened at the MDS (guarded by mu); filling counts
	// those that keep bytes for their close (whole.go).
	deferred map[*handle]struct{}
	filling  int

	// modeGid is the mode (low 32 bits) and group last seen, for the
	// set-ID bits a write clears (dropPrivileges).
	modeGid atomic.Uint64
	// timesKept: the file's mtime was set since its last write on this
	// mount, so writing out bytes kept from before (whole.go) must not
	// move it (braid.File.KeepTimes).
	timesKept atomic.Bool
}

var (
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeOpendirHandler)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeMknoder)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
)

// uninterrupted detaches an operation from the kernel's interrupts. A
// program's syscall is interrupted by any signal it catches (Go's runtime
// sends SIGURG all the time); the MDS may have applied the operation
// already, so it is finished and answered rather than abandoned (a
// cancelled create would otherwise fail with EIO, and its retry with
// EEXIST). Every MDS call is bounded by the client's IOTimeout.
func uninterrupted(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// errno maps a braid error to the errno POSIX programs expect.
func errno(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, braid.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, braid.ErrExists):
		return syscall.EEXIST
	case errors.Is(err, braid.ErrNotDir):
		return syscall.ENOTDIR
	case errors.Is(err, braid.ErrIsDir):
		return syscall.EISDIR
	case errors.Is(err, braid.ErrNotEmpty):
		return syscall.ENOTEMPTY
	case errors.Is(err, braid.ErrNoSpace):
		return syscall.ENOSPC
	case errors.Is(err, braid.ErrNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, braid.ErrInvalid), errors.Is(err, braid.ErrBadLayout):
		return syscall.EINVAL
	case errors.Is(err, braid.ErrNoData):
		return syscall.ENODATA
	case errors.Is(err, braid.ErrPerm):
		return syscall.EPERM
	case errors.Is(err, braid.ErrDenied):
		return syscall.EACCES
	case errors.Is(err, braid.ErrBusy):
		return syscall.EAGAIN
	case errors.Is(err, braid.ErrTooBig):
		return syscall.EFBIG
	case errors.Is(err, braid.ErrOverflow):
		return syscall.EOVERFLOW
	}
	return syscall.EIO
}

func fillAttr(a braid.Attr, out *fuse.Attr) {
	out.Ino = a.Ino
	out.Size = uint64(max(a.Size, 0))
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = maxWriteBytes
	out.Mode = typeBits(a.Type) | a.Mode&0o7777
	out.Nlink = a.Nlink // 0 for an open file whose last name is gone
	out.Rdev = uint32(a.Rdev)
	out.Owner = fuse.Owner{Uid: a.Uid, Gid: a.Gid}
	setTime := func(ns int64) (uint64, uint32) { return uint64(ns / 1e9), uint32(ns % 1e9) }
	atime := a.AtimeNs
	if atime == 0 {
		atime = a.MtimeNs
	}
	out.Atime, out.Atimensec = setTime(atime)
	out.Mtime, out.Mtimensec = setTime(a.MtimeNs)
	out.Ctime, out.Ctimensec = setTime(a.CtimeNs)
}

// child makes (or finds) the kernel inode for a, named name in n, and
// fills out.
func (n *node) child(ctx context.Context, name string, a braid.Attr, out *fuse.EntryOut) *fs.Inode {
	return n.childNamed(ctx, name, a, out, true)
}

// childNamed is child; keepName says whether the kernel may keep the
// name (a READDIRPLUS answer may not: dir.go).
func (n *node) childNamed(ctx context.Context, name string, a braid.Attr, out *fuse.EntryOut, keepName bool) *fs.Inode {
	// The inode may have a writer on this mount whose bytes are not
	// committed yet: the kernel takes the size from this reply, and must
	// not shrink the file under its descriptors (a new descriptor read
	// nothing; found by TestFileOperationsAgainstLocalFile).
	n.m.withWriterSize(&a)
	fillAttr(a, &out.Attr)
	out.SetEntryTimeout(n.m.opts.EntryTimeout)
	if e := n.m.epochs.Load(); e != nil && keepName {
		// Marked before the cache is asked: a recall of this directory
		// from here on moves the kernel's epoch, which drops the name.
		if e.mark(n.ino) {
			d := kernelShare(n.m.cl.CachedEntryFor(n.ino, name, a.Ino))
			e.gave(d)
			out.SetEntryTimeout(d)
		}
	}
	// The kernel keeps these attributes only for an inode it has
	// already: an invalidation that reaches it before this reply makes
	// it drop the reply's attributes then (its attribute version), but
	// one for an inode it does not have yet is lost (found by review).
	out.SetAttrTimeout(0)
	if known := n.GetChild(name); !n.m.opts.CacheMetadata || known != nil && known.StableAttr().Ino == a.Ino {
		out.SetAttrTimeout(n.m.attrTimeout(a))
	}
	child := n.NewInode(ctx, &node{m: n.m, ino: a.Ino}, fs.StableAttr{Mode: typeBits(a.Type), Ino: a.Ino})
	child.Operations().(*node).saw(a)
	return child
}

func owner(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	if len(name) > 255 {
		return nil, syscall.ENAMETOOLONG
	}
	return n.lookup(ctx, name, out, true)
}

// lookup answers a LOOKUP; keepName as in childNamed.
func (n *node) lookup(ctx context.Context, name string, out *fuse.EntryOut, keepName bool) (*fs.Inode, syscall.Errno) {
	n.m.lookups.Add(1)
	a, err := n.m.cl.LookupAt(ctx, n.ino, name)
	if err != nil {
		return nil, errno(err)
	}
	return n.childNamed(ctx, name, a, out, keepName), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	a, err := n.m.cl.GetAttr(ctx, n.ino)
	if err != nil {
		return errno(err)
	}
	n.saw(a)
	n.m.withWriterSize(&a)
	fillAttr(a, &out.Attr)
	out.SetTimeout(n.m.attrTimeout(a))
	return 0
}

// attrTimeout is how long the kernel may keep a: with CacheMetadata, as
// long as the cache holds it under its lease (a change is invalidated
// in the kernel too), else AttrTimeout.
func (m *mount) attrTimeout(a braid.Attr) time.Duration {
	if !m.opts.CacheMetadata {
		return m.opts.AttrTimeout
	}
	return kernelShare(m.cl.CachedFor(a))
}

// kernelSlack is taken off what the kernel is let keep: it starts the
// time when it reads the reply, later than the cache counted from, and
// rounds up to its clock ticks.
const kernelSlack = 50 * time.Millisecond

// kernelShare is how long the kernel may keep what the cache may keep
// for d.
func kernelShare(d time.Duration) time.Duration {
	return max(d-kernelSlack, 0)
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	if size, ok := in.GetSize(); ok {
		if e := n.truncate(ctx, int64(size)); e != 0 {
			return e
		}
	}
	req := braid.SetAttrRequest{Ino: n.ino}
	changed := false
	if mode, ok := in.GetMode(); ok {
		m := mode & 0o7777
		if groups, kill := n.killsOnly(ctx, m); kill {
			req.KillSuidgid, req.WriterGroups, changed = true, groups, true
		} else {
			req.Mode, changed = &m, true
		}
	}
	if uid, ok := in.GetUID(); ok {
		req.Uid, changed = &uid, true
	}
	if gid, ok := in.GetGID(); ok {
		req.Gid, changed = &gid, true
	}
	if t, ok := in.GetATime(); ok {
		ns := t.UnixNano()
		req.AtimeNs, changed = &ns, true
	}
	if t, ok := in.GetMTime(); ok {
		ns := t.UnixNano()
		req.MtimeNs, changed = &ns, true
	}
	if changed {
		if _, err := n.m.cl.SetAttr(ctx, req); err != nil {
			return errno(err)
		}
		if req.MtimeNs != nil {
			n.timesSet()
		}
	}
	return n.Getattr(ctx, f, out)
}

// killsOnly reports whether a mode change to mode, asked by a caller
// that does not own the file, is the kernel clearing set-ID bits after
// that caller's write or truncation (as it does on its own authority):
// then it goes to the MDS as such, with the caller's groups, which a
// writer may ask, and not as a chmod, which only the owner may.
func (n *node) killsOnly(ctx context.Context, mode uint32) ([]uint32, bool) {
	fc, ok := fuse.FromContext(ctx)
	if !ok || fc.Uid == 0 {
		return nil, false
	}
	a, err := n.m.cl.GetAttr(ctx, n.ino)
	if err != nil || a.Uid == fc.Uid {
		return nil, false
	}
	groups := n.m.groupsOf(ctx)
	killed := braid.KilledOnWrite(a.Mode, a.Gid, groups)
	return groups, killed != 0 && a.Mode&0o7777&^killed == mode
}

// truncate changes the file's size through the mount's writer, opened
// for the purpose if no handle has it open.
func (n *node) truncate(ctx context.Context, size int64) syscall.Errno {
	if e := n.writeKept(ctx); e != 0 {
		return e
	}
	w, err := n.openWriter(ctx)
	if err != nil {
		return errno(err)
	}
	err = w.Truncate(size)
	if cerr := n.releaseWriter(false); err == nil {
		err = cerr
	}
	return errno(err)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	write := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if e := n.writeKept(ctx); e != 0 {
		return nil, 0, e
	}
	var f *braid.File
	var err error
	if write {
		f, err = n.openWriter(ctx)
	} else {
		f, err = n.m.cl.OpenIno(ctx, n.ino, false)
		if err == nil {
			n.saw(f.Attr())
		}
	}
	if err != nil {
		return nil, 0, errno(err)
	}
	return n.newHandle(f, write), n.m.openFlags(write), 0
}

// openFlags: handles that write bypass the kernel's page cache (direct
// I/O): each write goes from the program's buffer to braid's stripe buffer
// without a stop in the page cache, which on writes costs more than it
// saves (measured: 1 GiB dd 0.38 → 0.51–0.60 GB/s). Read-only handles keep
// the page cache and kernel read-ahead.
func (m *mount) openFlags(write bool) uint32 {
	if write && m.directWrites.Load() {
		return fuse.FOPEN_DIRECT_IO
	}
	return 0
}

func (n *node) newHandle(f *braid.File, write bool) *handle {
	return &handle{f: f, write: write, n: n}
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	uid, gid := owner(ctx)
	co := braid.CreateOptions{Mode: mode & 0o7777, SizeHint: -1, Exclusive: true, Uid: uid, Gid: gid}
	if a, deferred, err := n.m.cl.CreateDeferredAt(ctx, n.ino, name, co); err != nil {
		if !errors.Is(err, braid.ErrExists) || flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, errno(err)
		}
	} else if deferred {
		// Made here only (a write-back claim): opened at the MDS when
		// first written.
		child := n.child(ctx, name, a, out)
		cn := child.Operations().(*node)
		h := &handle{write: true, n: cn, deferred: true}
		cn.mu.Lock()
		if cn.deferred == nil {
			cn.deferred = map[*handle]struct{}{}
		}
		cn.deferred[h] = struct{}{}
		cn.mu.Unlock()
		return child, h, n.m.openFlags(true), 0
	}
	f, err := n.m.cl.CreateAt(ctx, n.ino, name, co)
	if errors.Is(err, braid.ErrExists) && flags&syscall.O_EXCL == 0 {
		// Another client created it since the kernel looked: open it.
		a, lerr := n.m.cl.LookupAt(ctx, n.ino, name)
		if lerr != nil {
			return nil, nil, 0, errno(lerr)
		}
		child := n.child(ctx, name, a, out)
		fh, fl, e := child.Operations().(*node).Open(ctx, flags)
		if e == 0 && flags&syscall.O_TRUNC != 0 {
			e = errno(fh.(*handle).f.Truncate(0))
		}
		return child, fh, fl, e
	}
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	child := n.child(ctx, name, f.Attr(), out)
	cn := child.Operations().(*node)
	return child, cn.newHandle(cn.adoptWriter(f), true), n.m.openFlags(true), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	uid, gid := owner(ctx)
	a, err := n.m.cl.MkdirAt(ctx, n.ino, name, mode&0o7777, uid, gid)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, a, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if ci := n.GetChild(name); ci != nil {
		if child, ok := ci.Operations().(*node); ok {
			if e := child.openDeferred(ctx); e != 0 {
				return e
			}
		}
	}
	ctx = n.m.opCtx(ctx)
	return n.m.namesChanged(n.m.cl.RemoveAt(ctx, n.ino, name, false))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	return n.m.namesChanged(n.m.cl.RemoveAt(ctx, n.ino, name, true))
}

// Linux rename flags.
const (
	renameNoReplace = 1
	renameExchange  = 2
)

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	if flags&^renameNoReplace != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	return n.m.namesChanged(n.m.cl.RenameAt(ctx, n.ino, name, np.ino, newName, flags&renameNoReplace != 0))
}

// namesChanged answers a name-changing operation. One that failed may
// still have been done (an MDS reached, its answer lost past every
// retry) where the kernel, told it failed, keeps the old names: all of
// them are dropped then.
func (m *mount) namesChanged(err error) syscall.Errno {
	en := errno(err)
	switch en {
	case 0, syscall.ENOENT, syscall.EEXIST, syscall.ENOTEMPTY, syscall.ENOTDIR, syscall.EISDIR,
		syscall.EINVAL, syscall.EPERM, syscall.EACCES, syscall.ENAMETOOLONG, syscall.EXDEV:
		return en // done, or refused by the MDS: the kernel's names are right
	}
	if e := m.epochs.Load(); e != nil {
		e.doubt()
		e.distrustSelf() // the change may still be done later, reported as this mount's own
	}
	return en
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	a, err := n.m.cl.Link(ctx, t.ino, n.ino, name)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, a, out), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	st, err := n.m.cl.Statfs(ctx)
	if err != nil {
		return errno(err)
	}
	out.Bsize, out.Frsize = blockBytes, blockBytes
	out.Blocks = uint64(st.CapacityBytes) / blockBytes
	out.Bfree = uint64(st.FreeBytes) / blockBytes
	out.Bavail = out.Bfree
	out.Files = 1 << 40
	out.Ffree = out.Files - uint64(max(st.Inodes, 0))
	out.NameLen = 255
	return 0
}

// Extended attributes. braid.layout reads and sets the layout.

// capabilityXattr is what the kernel looks up before every write (to drop
// file capabilities): braid keeps none, so it is answered here without a
// round trip to the MDS, and cannot be set.
const capabilityXattr = "security.capability"

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	if attr == capabilityXattr {
		return 0, syscall.ENODATA
	}
	r, err := n.m.cl.Xattr(ctx, braid.XattrRequest{Ino: n.ino, Op: "get", Name: attr})
	if err != nil {
		return 0, errno(err)
	}
	if len(dest) < len(r.Value) {
		return uint32(len(r.Value)), syscall.ERANGE
	}
	return uint32(copy(dest, r.Value)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	if attr == capabilityXattr {
		return syscall.EOPNOTSUPP
	}
	_, err := n.m.cl.Xattr(ctx, braid.XattrRequest{Ino: n.ino, Op: "set", Name: attr, Value: data, Flags: int(flags)})
	return errno(err)
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx = n.m.opCtx(ctx)
	_, err := n.m.cl.Xattr(ctx, braid.XattrRequest{Ino: n.ino, Op: "remove", Name: attr})
	return errno(err)
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx = n.m.opCtx(ctx)
	r, err := n.m.cl.Xattr(ctx, braid.XattrRequest{Ino: n.ino, Op: "list"})
	if err != nil {
		return 0, errno(err)
	}
	var b []byte
	for _, name := range r.Names {
		b = append(append(b, name...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}
