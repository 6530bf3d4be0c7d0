package client

import (
	"io"

	"github.com/braidfs/braid/internal/seal"
)

// The file's public data methods. Each sends a sealed file's call to
// sealed.go, which translates plaintext into stored blocks, and any
// other file's to the stored-bytes path: read.go, write.go, punch.go.

// Size is the file's size as this handle sees it. It does not wait for
// the handle's lock, which a flush holds for as long as it reads and
// sends (a mount's lookups and getattr ask for a writer's size).
func (f *File) Size() int64 {
	if f.isSealed {
		return seal.PlainSize(f.storedSize(), f.sealUnit)
	}
	return f.storedSize()
}

// ReadAt reads len(p) bytes at off. Each piece is read from the OSD
// holding its data unit, all pieces in parallel; a piece whose OSD is
// down, times out or returns a corrupt block is rebuilt from the stripe's
// other units (degraded read).
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if ok, err := f.sealed(); !ok || err != nil {
		if err != nil {
			return 0, err
		}
		return f.readAtStored(p, off)
	}
	return f.readAtSealed(p, off)
}

// WriteAt writes p at off. Data is gathered into whole stripes and sent
// behind the caller; errors from earlier writes surface here, in Sync and
// in Close.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if ok, err := f.sealed(); !ok || err != nil {
		if err != nil {
			return 0, err
		}
		return f.writeAtStored(p, off)
	}
	return f.writeAtSealed(p, off)
}

// Truncate sets the file's size. Shrinking rewrites the stripe holding the
// new end with zeros past it and cuts every object, so bytes beyond the
// size are never left behind to reappear if the file grows again.
func (f *File) Truncate(size int64) error {
	if ok, err := f.sealed(); !ok || err != nil {
		if err != nil {
			return err
		}
		return f.truncateStored(size)
	}
	return f.truncateSealed(size)
}

// PunchHole makes the range [off, off+n) read as zeros. A sealed file's
// whole blocks in it become holes (stored zeros, which read as zeros); the
// blocks at its ends are rewritten with zeros.
func (f *File) PunchHole(off, n int64) error {
	if ok, err := f.sealed(); !ok || err != nil {
		if err != nil {
			return err
		}
		return f.punchStored(off, n)
	}
	return f.punchSealed(off, n)
}

// ReadFrom copies r into the file from offset 0 onwards. Data is read
// straight into stripe buffers, so a byte is copied once on its way from
// r to the OSDs (a sealed file's is sealed on the way).
func (f *File) ReadFrom(r io.Reader) (int64, error) {
	if ok, err := f.sealed(); !ok || err != nil {
		if err != nil {
			return 0, err
		}
		return f.readFromStored(r)
	}
	return f.readFromSealed(r)
}

// WriteTo copies the whole file to w, reading ahead several windows of
// whole stripes in parallel while earlier ones are written out.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	if ok, err := f.sealed(); !ok || err != nil {
		if err != nil {
			return 0, err
		}
		return f.writeToStored(w)
	}
	return f.writeToSealed(w)
}
