package osd

import (
	"encoding/binary"
	"errors"
	"io"

	"golang.org/x/sys/unix"

	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Data maps: which ranges of an object hold data, so a checker or a scrub
// reads what was written, not the holes of a sparse file (an fsstress
// tree held 256 GiB apparent in 9 GiB stored, and check walked all of
// it). A range is data when its data file has blocks there (SEEK_DATA) or
// when any of its blocks' checksum entries is non-zero (written data the
// file system has lost reads as a hole, and must be read to be found).
// A range whose blocks are unallocated and whose entries are all zero is
// a hole: never written, or punched (stage.go), and reads as zeros. A
// file system that cannot tell holes says everything is data.

// dataFinder is a File that can find its next data range (lseek's
// SEEK_DATA and SEEK_HOLE): io.EOF when none is left.
type dataFinder interface {
	NextData(off int64) (data, hole int64, err error)
}

func (f *osFile) NextData(off int64) (int64, int64, error) {
	fd := int(f.Fd())
	data, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 0, 0, io.EOF
	}
	if err != nil {
		return 0, 0, errors.ErrUnsupported
	}
	hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, errors.ErrUnsupported
	}
	return data, hole, nil
}

func (f *limitFile) NextData(off int64) (int64, int64, error) { return nextData(f.File, off) }
func (f *faultFile) NextData(off int64) (int64, int64, error) { return nextData(f.File, off) }

// nextData is f's next data range from off, or ErrUnsupported.
func nextData(f File, off int64) (int64, int64, error) {
	if d, ok := f.(dataFinder); ok {
		return d.NextData(off)
	}
	return 0, 0, errors.ErrUnsupported
}

// DataMap reports which units of gran bytes of object k, from off, hold
// data (bit i of the map: [off+i*gran, off+(i+1)*gran)), up to the
// object's end or maxUnits, with the object's length and version. A
// missing object maps nothing, with length 0.
func (s *Store) DataMap(k ObjKey, version uint64, off, gran int64, maxUnits int) ([]byte, int64, uint64, error) {
	if gran < blockBytes || gran%blockBytes != 0 || off%gran != 0 || maxUnits <= 0 || maxUnits > osdproto.MaxDataMapUnits {
		return nil, 0, 0, wire.Errorf(wire.ErrBadRequest, "data map of %d-byte units from %d", gran, off)
	}
	o, done, err := s.lockObject(k, version, forRead)
	if err != nil {
		return nil, 0, 0, err
	}
	defer done()
	if o == nil {
		return nil, 0, 0, nil
	}
	units := int(min(int64(maxUnits), max(0, (o.size-off+gran-1)/gran)))
	bits := make([]byte, (units+7)/8)
	end := off + int64(units)*gran
	set := func(from, to int64) { // marks the units [from, to) touches
		for u := max(from, off) / gran * gran; u < min(to, end); u += gran {
			i := (u - off) / gran
			bits[i/8] |= 1 << (i % 8)
		}
	}
	if err := s.mapData(o, off, end, set); err != nil {
		return nil, 0, 0, s.ioError(err)
	}
	return bits, o.size, o.version, nil
}

// mapData calls set for every range of [off, end) of o that holds data.
func (s *Store) mapData(o *object, off, end int64, set func(from, to int64)) error {
	if o.packed {
		return s.packDataMap(o, off, end, set)
	}
	for at := off; at < end; {
		data, hole, err := nextData(o.data, at)
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errors.ErrUnsupported) {
			set(at, end) // cannot tell: all of it is data
			return nil
		}
		if err != nil {
			return err
		}
		if data >= end {
			break
		}
		set(data, hole)
		at = hole
	}
	return s.mapChecksums(o, off, end, set)
}

// mapChecksums marks blocks of [off, end) whose checksum entry is not
// zero: written, whatever their data file says. Only the allocated
// ranges of the checksum file are read.
func (s *Store) mapChecksums(o *object, off, end int64, set func(from, to int64)) error {
	first, last := off/blockBytes, (end+blockBytes-1)/blockBytes
	from, to := o.sumBase+4*first, o.sumBase+4*last
	buf := make([]byte, 0, 64<<10)
	for at := from; at < to; {
		data, hole, err := nextData(o.sum, at)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if errors.Is(err, errors.ErrUnsupported) {
			data, hole = at, to
		} else if err != nil {
			return err
		}
		data = max(data, from)
		hole = min(hole, to)
		for ; data < hole; data += int64(cap(buf)) {
			n := min(int64(cap(buf)), hole-data) / 4 * 4
			if n == 0 {
				break
			}
			b := buf[:n]
			if _, err := o.sum.ReadAt(b, data); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			for i := int64(0); i+4 <= n; i += 4 {
				if binary.LittleEndian.Uint32(b[i:]) != 0 {
					blk := (data + i - o.sumBase) / 4
					set(blk*blockBytes, (blk+1)*blockBytes)
				}
			}
		}
		if hole >= to {
			return nil
		}
		at = hole
	}
	return nil
}
