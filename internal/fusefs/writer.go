package fusefs

import (
	"context"
	"syscall"

	"github.com/braidfs/braid"
)

// One writer per inode per mount. Every descriptor this mount opens for
// writing on a file shares one braid.File: one size, one stripe being
// filled, one queue of stripe writes. Separate Files would each
// read-modify-write the stripes they touch from their own view and
// write back the other's bytes as they were (or as zeros past their own
// view of the size), and commit their own size over the other's: two
// processes writing interleaved blocks lost a third of them. Writers on
// other mounts are coordinated by the MDS instead.

// openWriter returns the mount's writer for n, opening it if no handle
// holds it, and counts one more holder.
func (n *node) openWriter(ctx context.Context) (*braid.File, error) {
	return n.openWriterSized(ctx, 0)
}

// openWriterSized is openWriter for a writer that fills the file to
// size bytes at once and closes it (size 0: not known; whole.go).
func (n *node) openWriterSized(ctx context.Context, size int64) (*braid.File, error) {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	if w := n.holdWriter(); w != nil {
		return w, nil
	}
	var f *braid.File
	var err error
	if size > 0 {
		f, err = n.m.cl.OpenInoWhole(ctx, n.ino, size)
	} else {
		f, err = n.m.cl.OpenIno(ctx, n.ino, true)
	}
	if err != nil {
		return nil, err
	}
	n.saw(f.Attr()) // fresh: a mode changed elsewhere is seen before this writer's first write
	n.setWriter(f)
	return f, nil
}

// adoptWriter makes f, just created, the mount's writer for n, unless
// one is open already (then f, which holds nothing yet, is closed).
func (n *node) adoptWriter(f *braid.File) *braid.File {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	if w := n.holdWriter(); w != nil {
		_ = f.Close()
		return w
	}
	n.setWriter(f)
	return f
}

// setWriter makes f n's writer, with one holder.
func (n *node) setWriter(f *braid.File) {
	n.mu.Lock()
	n.writer, n.writerRefs = f, 1
	n.mu.Unlock()
	n.m.wmu.Lock()
	if n.m.writing == nil {
		n.m.writing = map[uint64]*node{}
	}
	n.m.writing[n.ino] = n
	n.m.wmu.Unlock()
}

// withWriterSize raises a's size to that of the mount's writer for its
// inode, if one is open: bytes written but not yet committed.
func (m *mount) withWriterSize(a *braid.Attr) {
	if w := m.writerOf(a.Ino); w != nil {
		a.Size = max(a.Size, w.Size())
	}
	m.wmu.Lock()
	n := m.filling[a.Ino]
	m.wmu.Unlock()
	if n != nil {
		a.Size = max(a.Size, n.keptSize()) // bytes a handle keeps for its close (whole.go)
	}
}

// writerOf is the mount's writer for inode ino, or nil if none is open.
func (m *mount) writerOf(ino uint64) *braid.File {
	m.wmu.Lock()
	n := m.writing[ino]
	m.wmu.Unlock()
	if n == nil {
		return nil
	}
	return n.sharedWriter()
}

func (n *node) holdWriter() *braid.File {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.writer != nil {
		n.writerRefs++
	}
	return n.writer
}

// releaseWriter drops one holder; the last closes the writer (syncing
// it). A new open waits for that close, so it sees the size it commits.
// With synced, a holder that is not the last flushes the writer: what
// it wrote is committed (and durable, as the write-sync policy says) on
// return either way.
func (n *node) releaseWriter(synced bool) error {
	n.openMu.Lock()
	defer n.openMu.Unlock()
	n.mu.Lock()
	n.writerRefs--
	w, last := n.writer, n.writerRefs == 0
	if last {
		n.writer = nil
	}
	n.mu.Unlock()
	if !last {
		if synced {
			return w.Flush()
		}
		return nil
	}
	err := w.Close()
	n.m.wmu.Lock()
	if n.m.writing[n.ino] == n {
		delete(n.m.writing, n.ino)
	}
	n.m.wmu.Unlock()
	return err
}

// sharedWriter is the mount's writer for n, or nil if none is open.
func (n *node) sharedWriter() *braid.File {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.writer
}

// file is h's braid.File, opened now if h was deferred.
func (h *handle) file(ctx context.Context) (*braid.File, syscall.Errno) {
	if !h.deferred {
		return h.f, 0 // set when opened, never changed: reads and writes take no lock
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fileLocked(ctx)
}

func (h *handle) fileLocked(ctx context.Context) (*braid.File, syscall.Errno) {
	if h.f == nil {
		f, err := h.n.openWriter(h.n.m.opCtx(ctx))
		if err != nil {
			return nil, errno(err)
		}
		h.f = f
		h.n.undefer(h)
		if len(h.small) > 0 { // kept for a close that writes the file whole (whole.go)
			_, err := f.WriteAt(h.small, 0)
			h.dropWhole()
			if err != nil {
				return nil, errno(err)
			}
			h.n.keepTimesOf(f)
		}
	}
	return h.f, 0
}

// undefer forgets a deferred handle (opened, or released).
func (n *node) undefer(h *handle) {
	n.mu.Lock()
	delete(n.deferred, h)
	n.mu.Unlock()
}

// openDeferred opens at the MDS every handle of n made under a claim and
// not opened yet: an unlink then leaves the file to them, as an open
// file outlives its last name (nlink 0 to fstat), where unopened it
// would be gone.
func (n *node) openDeferred(ctx context.Context) syscall.Errno {
	return n.openDeferredIf(ctx, func(*handle) bool { return true })
}

// openDeferredIf opens the deferred handles of n that pick says (called
// under n.mu).
func (n *node) openDeferredIf(ctx context.Context, pick func(*handle) bool) syscall.Errno {
	n.mu.Lock()
	var hs []*handle
	for h := range n.deferred {
		if pick(h) {
			hs = append(hs, h)
		}
	}
	n.mu.Unlock()
	for _, h := range hs {
		if _, e := h.file(ctx); e != 0 {
			return e
		}
	}
	return 0
}
