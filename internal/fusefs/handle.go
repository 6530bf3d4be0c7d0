package fusefs

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/braidfs/braid"
)

// Open files: reads, writes, flush at close(2), fsync and release.

// handle is an open file.
type handle struct {
	mu    sync.Mutex // serialises Flush/Release against each other
	f     *braid.File
	write bool
	n     *node
	// deferred: the file was made under a write-back claim and f is
	// opened (the mount's writer) at the first use that needs the MDS.
	deferred bool
	// small are the bytes written to a deferred handle not opened yet,
	// kept for a close that writes the file whole (whole.go; under mu);
	// smallLen is their length, read without mu.
	small    []byte
	smallLen atomic.Int64
}

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileFlusher)((*handle)(nil))
	_ = (fs.FileFsyncer)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f, e := h.file(ctx)
	if e != 0 {
		return nil, e
	}
	if w := h.n.sharedWriter(); w != nil && !h.write {
		f = w // read the writes of this mount's other descriptors, as a local file system does
	}
	n, err := f.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if e := h.n.dropPrivileges(ctx); e != 0 {
		return 0, e
	}
	f := h.f
	if h.deferred {
		h.mu.Lock()
		if h.keepWhole(data, off) {
			h.n.timesKept.Store(false)
			h.mu.Unlock()
			return uint32(len(data)), 0
		}
		var e syscall.Errno
		f, e = h.fileLocked(ctx)
		h.mu.Unlock()
		if e != 0 {
			return 0, e
		}
	}
	h.n.timesKept.Store(false)
	n, err := f.WriteAt(data, off)
	if err != nil {
		return uint32(n), errno(err)
	}
	return uint32(n), 0
}

// Flush runs at every close(2): the data becomes durable and its size
// visible at the MDS, which is what close-to-open consistency promises.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if !h.write {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.f == nil {
		if len(h.small) > 0 {
			return h.writeWhole(ctx)
		}
		return 0 // nothing written: nothing to make visible but the name, which is
	}
	return errno(h.f.Flush())
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if !h.write {
		return 0
	}
	h.mu.Lock()
	f := h.f
	if f == nil && len(h.small) > 0 {
		var e syscall.Errno
		if f, e = h.fileLocked(ctx); e != 0 {
			h.mu.Unlock()
			return e
		}
	}
	h.mu.Unlock()
	if f != nil {
		if e := errno(f.Sync()); e != 0 {
			return e
		}
	}
	// The name too, if it was made under a write-back claim.
	return errno(h.n.m.cl.Settle(h.n.m.opCtx(ctx), h.n.ino))
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.deferred && h.f == nil {
		h.dropWhole() // kept past a failed close: its error was reported there
		h.n.undefer(h)
		return 0 // not opened at the MDS, or written whole and closed at its flush
	}
	if h.write {
		return errno(h.n.releaseWriter(false))
	}
	return errno(h.f.Close())
}
