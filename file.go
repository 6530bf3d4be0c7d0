package braid

import (
	"io"

	"github.com/braidfs/braid/internal/client"
)

// File is an open braid file. Writes are buffered into whole stripes and
// sent to the OSDs behind the caller (write-behind); Sync and Close wait
// until every OSD has the data on disk and record the size at the MDS.
// Its methods are safe for concurrent use.
type File struct{ f *client.File }

// wrapFile is f as the public API hands it out (nil stays nil).
func wrapFile(f *client.File) *File {
	if f == nil {
		return nil
	}
	return &File{f: f}
}

// Abort releases the file without committing what was written since the
// last Sync. An Atomic create never gets its name: it is deleted with its
// objects. Use it when the data being written turned out bad (the source
// failed); Close after Abort does nothing.
func (f *File) Abort() error {
	return f.f.Abort()
}

// Attr is the file's attributes as of its open or its last commit (Sync,
// Close), with this handle's size.
func (f *File) Attr() Attr {
	return f.f.Attr()
}

// Close flushes and syncs a file opened for writing, then releases it.
// An Atomic create gets its name here, if everything succeeded.
func (f *File) Close() error {
	return f.f.Close()
}

// Ino is the file's inode number.
func (f *File) Ino() uint64 {
	return f.f.Ino()
}

// Name is the path the file was opened with.
func (f *File) Name() string {
	return f.f.Name()
}

// PunchHole makes the range [off, off+n) read as zeros. A sealed file's
// whole blocks in it become holes (stored zeros, which read as zeros); the
// blocks at its ends are rewritten with zeros.
func (f *File) PunchHole(off, n int64) error {
	return f.f.PunchHole(off, n)
}

// ReadAt reads len(p) bytes at off. Each piece is read from the OSD
// holding its data unit, all pieces in parallel; a piece whose OSD is
// down, times out or returns a corrupt block is rebuilt from the stripe's
// other units (degraded read).
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.f.ReadAt(p, off)
}

// ReadFrom copies r into the file from offset 0 onwards. Data is read
// straight into stripe buffers, so a byte is copied once on its way from
// r to the OSDs (a sealed file's is sealed on the way).
func (f *File) ReadFrom(r io.Reader) (int64, error) {
	return f.f.ReadFrom(r)
}

// Size is the file's size as this handle sees it. It does not wait for
// the handle's lock, which a flush holds for as long as it reads and
// sends (a mount's lookups and getattr ask for a writer's size).
func (f *File) Size() int64 {
	return f.f.Size()
}

// Spec is the file's layout spec.
func (f *File) Spec() string {
	return f.f.Spec()
}

// Sync makes everything written so far durable on the OSDs and records the
// size at the MDS. A component whose OSD could not be reached is recorded
// as dirty (read by reconstruction) as long as every parity group keeps
// enough components; otherwise Sync fails.
func (f *File) Sync() error {
	return f.f.Sync()
}

// KeepTimes says the file's times were just set (utimensat after the
// last write): the commits that follow leave its modification time as
// set, until the next write.
func (f *File) KeepTimes() { f.f.KeepTimes() }

// Flush makes what was written so far visible to other clients, as Close
// does, and keeps the file open: durable on return under the cluster
// write-sync policy, within a second under async (braid.sync).
func (f *File) Flush() error {
	return f.f.Flush()
}

// Truncate sets the file's size. Shrinking rewrites the stripe holding the
// new end with zeros past it and cuts every object, so bytes beyond the
// size are never left behind to reappear if the file grows again.
func (f *File) Truncate(size int64) error {
	return f.f.Truncate(size)
}

// WriteAt writes p at off. Data is gathered into whole stripes and sent
// behind the caller; errors from earlier writes surface here, in Sync and
// in Close.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.f.WriteAt(p, off)
}

// WriteTo copies the whole file to w, reading ahead several windows of
// whole stripes in parallel while earlier ones are written out.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	return f.f.WriteTo(w)
}
