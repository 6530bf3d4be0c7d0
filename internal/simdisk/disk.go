// Package simdisk is the disk twin of the simulation: an in-memory file
// system behind osd.FS that keeps, next to what a program sees, what would
// survive a power cut, and that can lose files, tear writes, flip bits and
// fail operations (EIO, ENOSPC) on request.
//
// Durability follows what Linux file systems promise and no more: a
// file's bytes survive a crash once the file is fsynced; a name (created,
// or removed) once its directory is fsynced. On Crash everything else is
// lost, except that, as disks do, some of the writes made since a file's
// last fsync may have reached the platter anyway, the last of them torn at
// a sector boundary. Which ones is drawn from the caller's random source,
// so a seed replays the same crash.
package simdisk

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/braidfs/braid/internal/osd"
)

// sectorBytes is the unit a torn write keeps or loses.
const sectorBytes = 512

// maxUnsyncedWrites bounds the writes remembered per file for tearing;
// past it, older unsynced writes are simply lost on a crash.
const maxUnsyncedWrites = 64

// Disk is an in-memory osd.FS. Paths are cleaned and need no parent
// directories other than those made by MkdirAll (as a real disk, a file
// in a missing directory cannot be created). Safe for concurrent use.
type Disk struct {
	mu       sync.Mutex
	dirs     map[string]*dir // current namespace
	capacity int64           // 0: unlimited
	used     int64           // bytes of file data held (current)
	// Fault, if set, is asked before every operation and may fail it
	// (return non-nil): EIO, ENOSPC, ... It is called without the disk's
	// lock held and must be safe for concurrent use.
	Fault func(op osd.FaultOp, path string) error
}

type dir struct {
	entries map[string]*inode // current
	durable map[string]*inode // as of the last fsync of the directory
	isDir   map[string]bool   // entries that are directories (always durable: MkdirAll syncs)
}

type inode struct {
	data     []byte  // what reads see
	synced   []byte  // what survives a crash
	unsynced []write // writes since the last fsync, oldest first, for tearing
	mtime    time.Time
}

type write struct {
	off  int64
	data []byte
	size int64 // file size after a truncate (data nil)
}

// New returns an empty disk holding at most capacity bytes of file data
// (0: unlimited).
func New(capacity int64) *Disk {
	return &Disk{dirs: map[string]*dir{"/": newDir()}, capacity: capacity}
}

func newDir() *dir {
	return &dir{entries: map[string]*inode{}, durable: map[string]*inode{}, isDir: map[string]bool{}}
}

func clean(p string) string { return path.Clean("/" + p) }

func (d *Disk) fault(op osd.FaultOp, p string) error {
	if d.Fault == nil {
		return nil
	}
	return d.Fault(op, p)
}

func pathErr(op, p string, err error) error { return &os.PathError{Op: op, Path: p, Err: err} }

// MkdirAll makes p and its parents, durably.
func (d *Disk) MkdirAll(p string, _ os.FileMode) error {
	p = clean(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	for cur := p; ; cur = path.Dir(cur) {
		if _, ok := d.dirs[cur]; !ok {
			d.dirs[cur] = newDir()
		}
		if cur == "/" {
			break
		}
		parent := d.dirs[path.Dir(cur)]
		if parent == nil {
			parent = newDir()
			d.dirs[path.Dir(cur)] = parent
		}
		parent.isDir[path.Base(cur)] = true
	}
	return nil
}

// OpenFile opens (with os.O_CREATE, creates; with os.O_TRUNC, empties)
// the file at p. Opening a directory gives a handle whose Sync makes its
// entries durable.
func (d *Disk) OpenFile(p string, flag int, _ os.FileMode) (osd.File, error) {
	p = clean(p)
	if err := d.fault(osd.FaultOpen, p); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.dirs[p]; ok {
		return &file{d: d, path: p, isDir: true}, nil
	}
	parent := d.dirs[path.Dir(p)]
	if parent == nil {
		return nil, pathErr("open", p, fs.ErrNotExist)
	}
	name := path.Base(p)
	in := parent.entries[name]
	switch {
	case in == nil && flag&os.O_CREATE == 0:
		return nil, pathErr("open", p, fs.ErrNotExist)
	case in == nil:
		in = &inode{mtime: time.Now()}
		parent.entries[name] = in
	case flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", p, fs.ErrExist)
	}
	if flag&os.O_TRUNC != 0 {
		d.truncateLocked(in, 0)
	}
	return &file{d: d, path: p, in: in}, nil
}

// Remove unlinks the file or empty directory at p (durable once its
// directory is synced).
func (d *Disk) Remove(p string) error {
	p = clean(p)
	if err := d.fault(osd.FaultRemove, p); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if sub, ok := d.dirs[p]; ok {
		if len(sub.entries) > 0 || len(sub.isDir) > 0 {
			return pathErr("remove", p, syscall.ENOTEMPTY)
		}
		delete(d.dirs, p)
		delete(d.dirs[path.Dir(p)].isDir, path.Base(p))
		return nil
	}
	parent := d.dirs[path.Dir(p)]
	if parent == nil || parent.entries[path.Base(p)] == nil {
		return pathErr("remove", p, fs.ErrNotExist)
	}
	d.used -= int64(len(parent.entries[path.Base(p)].data)) // no hard links here: the name was its only one
	delete(parent.entries, path.Base(p))
	return nil
}

// ReadDir lists p's entries, sorted by name.
func (d *Disk) ReadDir(p string) ([]os.DirEntry, error) {
	p = clean(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	dr := d.dirs[p]
	if dr == nil {
		return nil, pathErr("readdir", p, fs.ErrNotExist)
	}
	var out []os.DirEntry
	for name, in := range dr.entries {
		out = append(out, fs.FileInfoToDirEntry(info{name: name, size: int64(len(in.data)), mtime: in.mtime}))
	}
	for name := range dr.isDir {
		out = append(out, fs.FileInfoToDirEntry(info{name: name, dir: true}))
	}
	slices.SortFunc(out, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// Statfs reports the capacity and what is left of it.
func (d *Disk) Statfs(string) (int64, int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	total := d.capacity
	if total == 0 {
		total = 1 << 50
	}
	return total, max(0, total-d.used), nil
}

// Crash loses what a power cut would: every name not made durable by a
// directory fsync, every byte not made durable by a file fsync, except a
// random prefix of each file's unsynced writes, the last of them torn at
// a sector boundary (rng decides; nil keeps none).
func (d *Disk) Crash(rng *rand.Rand) { d.CrashUnder("/", rng) }

// CrashUnder is Crash for the directory tree at root only: one machine's
// power cut where several share the disk twin. Its owner must have
// stopped using the tree first (a dead machine does nothing more).
func (d *Disk) CrashUnder(root string, rng *rand.Rand) {
	root = clean(root)
	under := strings.TrimSuffix(root, "/") + "/"
	d.mu.Lock()
	defer d.mu.Unlock()
	crashed := map[*inode]bool{}
	// In path order, so one seed tears the same writes every run.
	for _, dp := range slices.Sorted(maps.Keys(d.dirs)) {
		if dp != root && !strings.HasPrefix(dp, under) {
			continue
		}
		dr := d.dirs[dp]
		dr.entries = make(map[string]*inode, len(dr.durable))
		for _, name := range slices.Sorted(maps.Keys(dr.durable)) {
			in := dr.durable[name]
			dr.entries[name] = in
			if !crashed[in] {
				crashed[in] = true
				in.data = tornImage(in, rng)
				in.synced = slices.Clone(in.data)
				in.unsynced = nil
			}
		}
	}
	d.used = 0
	counted := map[*inode]bool{}
	for _, dr := range d.dirs {
		for _, in := range dr.entries {
			if !counted[in] {
				counted[in] = true
				d.used += int64(len(in.data))
			}
		}
	}
}

// tornImage is what in holds after a crash: its synced bytes plus a
// random prefix of the writes since, the last one cut at a sector.
func tornImage(in *inode, rng *rand.Rand) []byte {
	img := slices.Clone(in.synced)
	if rng == nil || len(in.unsynced) == 0 {
		return img
	}
	keep := rng.IntN(len(in.unsynced) + 1)
	for i, w := range in.unsynced[:keep] {
		if w.data == nil {
			img = resize(img, w.size)
			continue
		}
		data := w.data
		if i == keep-1 {
			// Torn at a sector boundary of the disk: a whole number of
			// the write's sectors reached it.
			cut := (w.off/sectorBytes + int64(rng.IntN(len(data)/sectorBytes+2))) * sectorBytes
			data = data[:min(int64(len(data)), max(0, cut-w.off))]
		}
		img = resize(img, max(int64(len(img)), w.off+int64(len(data))))
		copy(img[w.off:], data)
	}
	return img
}

func resize(b []byte, n int64) []byte {
	if n <= int64(len(b)) {
		return b[:n]
	}
	return append(b, make([]byte, n-int64(len(b)))...)
}

// LoseFile makes the file at p vanish, durably: a lost file, an fsck, a
// restored backup that predates it.
func (d *Disk) LoseFile(p string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	dr, name, in := d.lookupLocked(p)
	if in == nil {
		return false
	}
	d.used -= int64(len(in.data))
	delete(dr.entries, name)
	delete(dr.durable, name)
	return true
}

// lookupLocked finds the file at p: its directory, name and inode (nil
// if there is none).
func (d *Disk) lookupLocked(p string) (*dir, string, *inode) {
	p = clean(p)
	dr := d.dirs[path.Dir(p)]
	if dr == nil {
		return nil, "", nil
	}
	return dr, path.Base(p), dr.entries[path.Base(p)]
}

// FlipBit flips bit bit of the byte at off in the file at p, durably
// (decay on the medium). It reports whether the byte exists.
func (d *Disk) FlipBit(p string, off int64, bit uint) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, _, in := d.lookupLocked(p)
	if in == nil || off < 0 || off >= int64(len(in.data)) {
		return false
	}
	in.data[off] ^= 1 << (bit % 8)
	if off < int64(len(in.synced)) {
		in.synced[off] ^= 1 << (bit % 8)
	}
	return true
}

// Files lists every file path on the disk, sorted.
func (d *Disk) Files() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for dp, dr := range d.dirs {
		for name := range dr.entries {
			out = append(out, path.Join(dp, name))
		}
	}
	slices.Sort(out)
	return out
}

func (d *Disk) truncateLocked(in *inode, size int64) error {
	grow := size - int64(len(in.data))
	if grow > 0 && d.capacity > 0 && d.used+grow > d.capacity {
		return syscall.ENOSPC
	}
	d.used += grow
	in.data = resize(in.data, size)
	in.unsynced = appendBounded(in.unsynced, write{size: size})
	in.mtime = time.Now()
	return nil
}

func appendBounded(ws []write, w write) []write {
	if len(ws) == maxUnsyncedWrites {
		ws = ws[1:]
	}
	return append(ws, w)
}

// file is an open handle.
type file struct {
	d     *Disk
	path  string
	in    *inode
	isDir bool
}

var errIsDir = errors.New("is a directory")

// begin refuses data operations on a directory handle and asks Fault.
func (f *file) begin(op osd.FaultOp) error {
	if f.isDir {
		return pathErr(string(op), f.path, errIsDir)
	}
	return f.d.fault(op, f.path)
}

func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if err := f.begin(osd.FaultRead); err != nil {
		return 0, err
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if off >= int64(len(f.in.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.in.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if err := f.begin(osd.FaultWrite); err != nil {
		return 0, err
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	end := off + int64(len(p))
	if grow := end - int64(len(f.in.data)); grow > 0 {
		if f.d.capacity > 0 && f.d.used+grow > f.d.capacity {
			return 0, pathErr("write", f.path, syscall.ENOSPC)
		}
		f.d.used += grow
		f.in.data = resize(f.in.data, end)
	}
	copy(f.in.data[off:], p)
	f.in.unsynced = appendBounded(f.in.unsynced, write{off: off, data: slices.Clone(p)})
	f.in.mtime = time.Now()
	return len(p), nil
}

func (f *file) Truncate(size int64) error {
	if err := f.begin(osd.FaultTruncate); err != nil {
		return err
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if err := f.d.truncateLocked(f.in, size); err != nil {
		return pathErr("truncate", f.path, err)
	}
	return nil
}

// Sync makes a file's bytes durable, or a directory's entries.
func (f *file) Sync() error {
	if err := f.d.fault(osd.FaultSync, f.path); err != nil {
		return err
	}
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if f.isDir {
		if dr := f.d.dirs[f.path]; dr != nil {
			dr.durable = make(map[string]*inode, len(dr.entries))
			for name, in := range dr.entries {
				dr.durable[name] = in
			}
		}
		return nil
	}
	f.in.synced = slices.Clone(f.in.data)
	f.in.unsynced = nil
	return nil
}

func (f *file) Close() error { return nil }

func (f *file) Stat() (os.FileInfo, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if f.isDir {
		return info{name: path.Base(f.path), dir: true}, nil
	}
	return info{name: path.Base(f.path), size: int64(len(f.in.data)), mtime: f.in.mtime}, nil
}

// info is an os.FileInfo.
type info struct {
	name  string
	size  int64
	mtime time.Time
	dir   bool
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.size }
func (i info) ModTime() time.Time { return i.mtime }
func (i info) IsDir() bool        { return i.dir }
func (i info) Sys() any           { return nil }
func (i info) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
