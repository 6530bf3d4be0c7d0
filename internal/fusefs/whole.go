package fusefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/layout"
)

// Small files written whole at close. A file made under a write-back
// claim is opened at the MDS only when first needed (handle.deferred).
// Writes to it that run in order from its start and stay within
// wholeFileBytes are kept in the handle instead of opening it: at
// close(2) the file is opened, written and closed in one go. The open
// then tells the MDS the file's size (braid.Client.OpenInoWhole): a
// small file is placed mirrored, one unit per copy, where a coded
// layout would write a whole stripe of units for a few KiB; and its
// close is one commit that also ends the writer's lease.
//
// Anything else that needs the file first writes out what a handle
// keeps (handle.fileLocked): a read, an fsync, a truncation, another
// open of the file on this mount, an unlink. The size the kernel is told
// counts the kept bytes (mount.withWriterSize). What is kept is lost if
// the mount dies before the close, as bytes in a stripe buffer are.

// wholeFileBytes bounds what a handle keeps: past it the file is opened
// and written as any other. Files up to this size are mirrored.
const wholeFileBytes = layout.SmallFileBytes

// keepWhole takes a write of a deferred handle not opened yet into what
// it keeps, if the write continues it and fits (false: the caller opens
// the file, which writes what is kept first). The caller holds h.mu.
func (h *handle) keepWhole(data []byte, off int64) bool {
	if h.f != nil || off != int64(len(h.small)) || len(h.small)+len(data) > wholeFileBytes {
		return false
	}
	if h.n.sharedWriter() != nil {
		// Another descriptor writes the file: this write lands in order
		// with its writes, not later at this handle's close.
		return false
	}
	if len(data) == 0 {
		return true
	}
	first := len(h.small) == 0
	if h.small == nil {
		h.small = make([]byte, 0, max(len(data), 4<<10))
	}
	h.small = append(h.small, data...)
	h.smallLen.Store(int64(len(h.small)))
	if first {
		h.n.startFilling()
	}
	return true
}

// dropWhole forgets what h keeps (written, or dropped at release). The
// caller holds h.mu.
func (h *handle) dropWhole() {
	if len(h.small) == 0 {
		return
	}
	h.small = nil
	h.smallLen.Store(0)
	h.n.stopFilling()
}

// writeWhole opens the file, writes what h keeps and closes it again
// (at close(2)): durable and committed, or an error. The caller holds
// h.mu and h.f is nil.
func (h *handle) writeWhole(ctx context.Context) syscall.Errno {
	n := h.n
	f, err := n.openWriterSized(n.m.opCtx(ctx), int64(len(h.small)))
	if err != nil {
		return errno(err)
	}
	_, werr := f.WriteAt(h.small, 0)
	h.dropWhole()
	n.keepTimesOf(f)
	return errno(errors.Join(werr, n.releaseWriter(true)))
}

// timesSet records that the file's mtime was just set (utimensat): the
// writer's next commit, and bytes kept from before and written out
// later, leave it as set (tar sets times before it closes).
func (n *node) timesSet() {
	n.timesKept.Store(true)
	if w := n.sharedWriter(); w != nil {
		w.KeepTimes()
	}
}

// keepTimesOf tells f, which just wrote out bytes kept from before the
// file's times were set, to keep them.
func (n *node) keepTimesOf(f *braid.File) {
	if n.timesKept.Load() {
		f.KeepTimes()
	}
}

// startFilling and stopFilling count n's handles that keep bytes, and
// list n with the mount while any does (for withWriterSize).
func (n *node) startFilling() {
	n.mu.Lock()
	n.filling++
	first := n.filling == 1
	n.mu.Unlock()
	if first {
		n.m.wmu.Lock()
		if n.m.filling == nil {
			n.m.filling = map[uint64]*node{}
		}
		n.m.filling[n.ino] = n
		n.m.wmu.Unlock()
	}
}

func (n *node) stopFilling() {
	n.mu.Lock()
	n.filling--
	last := n.filling == 0
	n.mu.Unlock()
	if last {
		n.m.wmu.Lock()
		if n.m.filling[n.ino] == n {
			delete(n.m.filling, n.ino)
		}
		n.m.wmu.Unlock()
	}
}

// keptSize is the largest size n's handles keep bytes for (0: none).
func (n *node) keptSize() int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var size int64
	if n.filling > 0 {
		for h := range n.deferred {
			size = max(size, h.smallLen.Load())
		}
	}
	return size
}

// writeKept writes out what n's handles keep, opening the file: before
// anything else on this mount reads or changes it.
func (n *node) writeKept(ctx context.Context) syscall.Errno {
	return n.openDeferredIf(ctx, func(h *handle) bool { return n.filling > 0 && h.smallLen.Load() > 0 })
}
