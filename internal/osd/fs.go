package osd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// File is the part of *os.File the store uses.
type File interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	Sync() error
	Close() error
	Stat() (os.FileInfo, error)
}

// FS is the disk as the store sees it, so tests can inject faults.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	MkdirAll(name string, perm os.FileMode) error
	ReadDir(name string) ([]os.DirEntry, error)
	// Statfs reports the total and available bytes of the file system.
	Statfs(name string) (total, avail int64, err error)
}

// OSFS is the real disk.
type OSFS struct{}

func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{File: f}, nil
}
func (OSFS) Remove(name string) error                     { return os.Remove(name) }
func (OSFS) MkdirAll(name string, perm os.FileMode) error { return os.MkdirAll(name, perm) }
func (OSFS) ReadDir(name string) ([]os.DirEntry, error)   { return os.ReadDir(name) }
func (OSFS) Statfs(name string) (int64, int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(name, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// LimitFS wraps an FS and fails with ENOSPC once the bytes its files have
// grown by exceed Capacity: a disk of a chosen size, for the --capacity flag
// and for tests of a full OSD.
type LimitFS struct {
	FS
	mu       sync.Mutex
	used     int64
	Capacity int64
}

// NewLimitFS limits fs to capacity bytes, of which used are taken already.
func NewLimitFS(fs FS, capacity, used int64) *LimitFS {
	return &LimitFS{FS: fs, Capacity: capacity, used: used}
}

func (l *LimitFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := l.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &limitFile{File: f, fs: l}, nil
}

func (l *LimitFS) Remove(name string) error {
	if fi, err := os.Stat(name); err == nil {
		l.grow(-fi.Size())
	}
	return l.FS.Remove(name)
}

func (l *LimitFS) Statfs(name string) (int64, int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Capacity, max(0, l.Capacity-l.used), nil
}

func (l *LimitFS) reserve(n int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used+n > l.Capacity {
		return false
	}
	l.used += n
	return true
}

func (l *LimitFS) grow(n int64) {
	l.mu.Lock()
	l.used += n
	l.mu.Unlock()
}

type limitFile struct {
	File
	fs *LimitFS
}

// ErrNoSpace is the error a full LimitFS returns, as the kernel would.
var ErrNoSpace error = &os.PathError{Op: "write", Path: "limitfs", Err: syscall.ENOSPC}

// reserveTo reserves what growing the file to end takes, and returns it.
func (f *limitFile) reserveTo(end int64) (int64, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	grow := max(0, end-fi.Size())
	if grow > 0 && !f.fs.reserve(grow) {
		return 0, ErrNoSpace
	}
	return grow, nil
}

func (f *limitFile) WriteAt(p []byte, off int64) (int, error) {
	if _, err := f.reserveTo(off + int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *limitFile) WriteDirectAt(p []byte, off int64) (int, error) {
	d, ok := f.File.(directWriter)
	if !ok {
		return 0, errNoDirect
	}
	grow, err := f.reserveTo(off + int64(len(p)))
	if err != nil {
		return 0, err
	}
	n, err := d.WriteDirectAt(p, off)
	if errors.Is(err, errNoDirect) {
		f.fs.grow(-grow) // the caller writes p buffered, which reserves again
	}
	return n, err
}

func (f *limitFile) Truncate(size int64) error {
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	if grow := size - fi.Size(); grow > 0 && !f.fs.reserve(grow) {
		return ErrNoSpace
	} else if grow < 0 {
		f.fs.grow(grow)
	}
	return f.File.Truncate(size)
}

func (f *limitFile) Punch(off, n int64) error { return punch(f.File, off, n) }

// puncher is a File that can deallocate a range and keep its size
// (fallocate's PUNCH_HOLE with KEEP_SIZE); errors.ErrUnsupported says
// its file system cannot.
type puncher interface {
	Punch(off, n int64) error
}

// zeroChunkBytes bounds the zeros written at once where a hole cannot
// be punched.
const zeroChunkBytes = 1 << 20

// punch makes [off, off+n) of f read as zeros without changing its size:
// deallocated where the file system can, written with zeros where not.
func punch(f File, off, n int64) error {
	if p, ok := f.(puncher); ok {
		if err := p.Punch(off, n); !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	zeros := make([]byte, min(n, zeroChunkBytes))
	for end := off + n; off < end; {
		w, err := f.WriteAt(zeros[:min(int64(len(zeros)), end-off)], off)
		if err != nil {
			return err
		}
		off += int64(w)
	}
	return nil
}

func (f *osFile) Punch(off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("punch hole in %s: %w", f.Name(), errors.ErrUnsupported)
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// startWriteback asks the kernel to begin writing f's dirty pages to disk
// without waiting. It is only a hint: errors surface at the next fsync.
func startWriteback(f File) {
	for {
		switch v := f.(type) {
		case *osFile:
			_ = unix.SyncFileRange(int(v.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
			return
		case *limitFile:
			f = v.File
		default:
			return
		}
	}
}
