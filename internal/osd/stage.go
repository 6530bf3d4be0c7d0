package osd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/braidfs/braid/internal/wire"
)

// Staged writes (Sigma's two-phase commit, Slice's intention log). A write
// that changes part of a stripe first stages each unit here: the bytes go
// to a side file, durable, and the object is untouched. Once the client
// has recorded the commit at the MDS, Apply copies them into the object;
// Abort throws them away. Until then a crash anywhere leaves the stripe as
// it was, and recovery (the MDS's intent resolver) finishes or undoes
// every staged write.
//
// Stage file objects/XX/<ino>.<comp>.<txid hex>.stg, format 1:
//
//	magic u32 "BSTG", format u16, pad u16, ino u64, comp u32, pad u32,
//	txid u64, version u64, off i64, len u32, dataCRC u32, headerCRC u32
//	(CRC32C of the 68 bytes before it), then len bytes of data.
const (
	stageMagic       = 0x47545342 // "BSTG"
	stageFormat      = 1
	stageHeaderBytes = 72
)

func (s *Store) stagePath(k ObjKey, txid uint64) string {
	return filepath.Join(s.dir, "objects", fmt.Sprintf("%02x", k.Ino&0xff),
		fmt.Sprintf("%016x.%d.%016x.stg", k.Ino, k.Comp, txid))
}

// Stage writes p, meant for object k at off, to a durable side file.
func (s *Store) Stage(k ObjKey, version, txid uint64, off int64, p []byte) error {
	_, done, err := s.lockObject(k, version, forRead) // refuse stale writers; create nothing yet
	if err != nil {
		return err
	}
	done()
	h := make([]byte, stageHeaderBytes)
	binary.LittleEndian.PutUint32(h[0:], stageMagic)
	binary.LittleEndian.PutUint16(h[4:], stageFormat)
	binary.LittleEndian.PutUint64(h[8:], k.Ino)
	binary.LittleEndian.PutUint32(h[16:], k.Comp)
	binary.LittleEndian.PutUint64(h[24:], txid)
	binary.LittleEndian.PutUint64(h[32:], version)
	binary.LittleEndian.PutUint64(h[40:], uint64(off))
	binary.LittleEndian.PutUint32(h[48:], uint32(len(p)))
	binary.LittleEndian.PutUint32(h[52:], wire.CRC(p))
	binary.LittleEndian.PutUint32(h[68:], wire.CRC(h[:68]))
	path := s.stagePath(k, txid)
	if err := s.fs.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return s.ioError(err)
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return s.ioError(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(h, 0); err != nil {
		return s.ioError(err)
	}
	if _, err := f.WriteAt(p, stageHeaderBytes); err != nil {
		return s.ioError(err)
	}
	if err := f.Sync(); err != nil {
		s.onFatal(fmt.Errorf("fsync stage %s: %w", path, err))
		return s.ioError(err)
	}
	return s.syncDir(filepath.Dir(path))
}

func (s *Store) syncDir(dir string) error {
	d, err := s.fs.OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		return s.ioError(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		s.onFatal(fmt.Errorf("fsync directory %s: %w", dir, err))
		return s.ioError(err)
	}
	return nil
}

// readStage loads and verifies a stage file. A missing one is ErrNotFound.
func (s *Store) readStage(k ObjKey, txid uint64) (off int64, data []byte, err error) {
	path := s.stagePath(k, txid)
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil, wire.Errorf(wire.ErrNotFound, "no staged write %x for object %x.%d", txid, k.Ino, k.Comp)
	}
	if err != nil {
		return 0, nil, s.ioError(err)
	}
	defer f.Close()
	h := make([]byte, stageHeaderBytes)
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: header unreadable: %v", path, err)
	}
	if binary.LittleEndian.Uint32(h[0:]) != stageMagic || binary.LittleEndian.Uint16(h[4:]) != stageFormat ||
		binary.LittleEndian.Uint32(h[68:]) != wire.CRC(h[:68]) ||
		binary.LittleEndian.Uint64(h[8:]) != k.Ino || binary.LittleEndian.Uint32(h[16:]) != k.Comp ||
		binary.LittleEndian.Uint64(h[24:]) != txid {
		return 0, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: header damaged", path)
	}
	off = int64(binary.LittleEndian.Uint64(h[40:]))
	n := binary.LittleEndian.Uint32(h[48:])
	if off < 0 || n > wire.MaxDataBytes {
		return 0, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: bad extent", path)
	}
	data = make([]byte, n)
	if _, err := f.ReadAt(data, stageHeaderBytes); err != nil {
		return 0, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: data unreadable: %v", path, err)
	}
	if wire.CRC(data) != binary.LittleEndian.Uint32(h[52:]) {
		return 0, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: data checksum mismatch", path)
	}
	return off, data, nil
}

// Apply copies staged write txid into object k, makes it durable, then
// drops the stage file. Applying twice is harmless: the second finds no
// stage and reports ErrNotFound, which callers treat as done. With
// osdproto.FlagMustExist a missing object is ErrLost (the stage stays).
func (s *Store) Apply(k ObjKey, version, txid uint64, flags uint8) (created bool, err error) {
	off, data, err := s.readStage(k, txid)
	if err != nil {
		return false, err
	}
	o, done, err := s.lockObject(k, version, updateMode(flags))
	if err != nil {
		return false, err
	}
	defer done()
	created, o.fresh = o.fresh, false
	if len(data) > 0 {
		if err := s.writeLocked(o, off, data); err != nil {
			return created, err
		}
	}
	if err := s.syncLocked(o); err != nil {
		return created, err
	}
	return created, s.dropStage(k, txid)
}

// Abort drops staged write txid; a missing one is not an error.
func (s *Store) Abort(k ObjKey, txid uint64) error { return s.dropStage(k, txid) }

func (s *Store) dropStage(k ObjKey, txid uint64) error {
	if err := s.fs.Remove(s.stagePath(k, txid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.ioError(err)
	}
	return nil
}

// dropStagesOf removes every stage file of object k (on deletion).
func (s *Store) dropStagesOf(k ObjKey) {
	dir := filepath.Dir(s.path(k, "dat"))
	entries, err := s.fs.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := fmt.Sprintf("%016x.%d.", k.Ino, k.Comp)
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, prefix) && strings.HasSuffix(name, ".stg") {
			_ = s.fs.Remove(filepath.Join(dir, name))
		}
	}
}
