package osd

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Direct writes. An OSD shares its machine's memory bandwidth with the
// clients and the other OSDs, and a buffered write costs a copy into the
// page cache plus the kernel's writeback later. Large aligned writes
// instead go straight from the request buffer to the disk (O_DIRECT): the
// device copies them, not the CPU, and an object's fsync then finds little
// left to write. Heads and tails that are not 4 KiB aligned, and small
// writes, stay buffered; the kernel keeps the two coherent (a direct write
// first writes back and drops cached pages it overlaps).

const (
	// directAlign is the alignment O_DIRECT needs of the buffer address,
	// file offset and length on every Linux file system braid supports.
	directAlign = 4096
	// minDirectBytes: writes shorter than this stay buffered; a direct
	// write waits for the device, which only pays for itself when large.
	minDirectBytes = 256 << 10
)

// errNoDirect: the file cannot take direct writes; write buffered.
var errNoDirect = errors.New("direct I/O not available")

// directWriter is a File that can also write past the page cache. p's
// address, off and len(p) must be multiples of directAlign.
type directWriter interface {
	WriteDirectAt(p []byte, off int64) (int, error)
}

// osFile is an *os.File with a second, O_DIRECT descriptor on the same
// inode, opened on first use.
type osFile struct {
	*os.File
	direct   *os.File
	noDirect bool // this file refused O_DIRECT
}

func (f *osFile) WriteDirectAt(p []byte, off int64) (int, error) {
	if f.noDirect {
		return 0, errNoDirect
	}
	if f.direct == nil {
		d, err := openDirect(f.File)
		if err != nil {
			f.noDirect = true
			return 0, errNoDirect
		}
		f.direct = d
	}
	n, err := f.direct.WriteAt(p, off)
	if errors.Is(err, syscall.EINVAL) && n == 0 {
		// Some file systems accept O_DIRECT at open and refuse the write.
		f.noDirect = true
		return 0, errNoDirect
	}
	return n, err
}

// directUseful says whether large writes in dir should go direct: its
// file system is not in memory (on tmpfs and ramfs O_DIRECT is emulated
// and costs more than the copy it saves) and takes an aligned O_DIRECT
// write. The store asks once, when it opens.
func directUseful(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC {
		return false
	}
	probe, err := os.CreateTemp(dir, "direct-probe-*")
	if err != nil {
		return false
	}
	defer os.Remove(probe.Name())
	defer probe.Close()
	d, err := openDirect(probe)
	if err != nil {
		return false
	}
	defer d.Close()
	buf := make([]byte, 2*directAlign)
	shift := int(directAlign-uintptr(unsafe.Pointer(&buf[0]))%directAlign) % directAlign
	_, err = d.WriteAt(buf[shift:shift+directAlign], 0)
	return err == nil
}

// openDirect opens f's inode again for direct writes. Reopening through
// /proc names exactly this inode, whatever has happened to the path since.
func openDirect(f *os.File) (*os.File, error) {
	return os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY|unix.O_DIRECT, 0)
}

func (f *osFile) Close() error {
	if f.direct != nil {
		_ = f.direct.Close()
	}
	return f.File.Close()
}

// writeData writes p at off in f: the aligned middle directly when direct
// is set, f can take it and it is large enough; the rest through the page
// cache. It returns how many bytes were written directly.
func writeData(f File, p []byte, off int64, direct bool) (directBytes int64, err error) {
	head, tail := directSplit(p, off)
	d, ok := f.(directWriter)
	if !direct || !ok || tail-head < minDirectBytes {
		_, err := f.WriteAt(p, off)
		return 0, err
	}
	n, err := d.WriteDirectAt(p[head:tail], off+int64(head))
	if errors.Is(err, errNoDirect) {
		_, err := f.WriteAt(p, off)
		return 0, err
	}
	if err != nil {
		return int64(n), err
	}
	if head > 0 {
		if _, err := f.WriteAt(p[:head], off); err != nil {
			return int64(n), err
		}
	}
	if tail < len(p) {
		if _, err := f.WriteAt(p[tail:], off+int64(tail)); err != nil {
			return int64(n), err
		}
	}
	return int64(n), nil
}

// directSplit returns the bounds [head, tail) of the part of p that can be
// written directly: it starts at an aligned file offset, sits at an aligned
// address, and is a whole number of blocks. head == tail when there is none.
func directSplit(p []byte, off int64) (head, tail int) {
	if len(p) == 0 {
		return 0, 0
	}
	head = int((directAlign - off%directAlign) % directAlign)
	if head >= len(p) {
		return 0, 0
	}
	if addr := uintptr(unsafe.Pointer(&p[head])); addr%directAlign != 0 {
		return 0, 0 // buffer and file are misaligned with each other
	}
	tail = head + (len(p)-head)/directAlign*directAlign
	return head, tail
}
