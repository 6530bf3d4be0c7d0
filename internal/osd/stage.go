package osd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/osdproto"
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
// Stage file objects/XX/<ino>.<comp>.<txid hex>.stg, format 1 (one
// segment):
//
//	magic u32 "BSTG", format u16, pad u16, ino u64, comp u32, pad u32,
//	txid u64, version u64, off i64, len u32, dataCRC u32, headerCRC u32
//	(CRC32C of the 68 bytes before it), then len bytes of data.
//
// Format 2 (several segments: a writer batched several stripes into one
// staged write) has the same header, off the first segment's, len all the
// data's, then n u32, (off i64, len u32) × n, tableCRC u32 (CRC32C of
// the table from n on), then the data, each segment's after the one
// before. A len with its top bit set is a segment of zeros that takes no
// data (osdproto.Seg.EncodedLen, as on the wire): applying punches it
// (zeroLocked). Applying writes every segment;
// applying again writes them again.
const (
	stageMagic       = 0x47545342 // "BSTG"
	stageFormat      = 1
	stageFormatSegs  = 2
	stageHeaderBytes = 72
)

func (s *Store) stagePath(k ObjKey, txid uint64) string {
	return filepath.Join(s.dir, "objects", fmt.Sprintf("%02x", k.Ino&0xff),
		fmt.Sprintf("%016x.%d.%016x.stg", k.Ino, k.Comp, txid))
}

// Tombstones: the outcome of a staged write outlives its stage file, as
// an empty file <ino>.<comp>.<txid>.app (applied) or .abt (aborted) next
// to it, so that no answer about a txid is ambiguous: an apply sent again
// is done, an apply of an aborted stage is refused (ErrInvalid: the unit
// is rebuilt), a stage arriving after its outcome (a copy the network
// held) is refused, and an abort of a stage never seen here fences it.
// "Not found" then means only "never staged here". Tombstones are kept
// for tombstoneRetention (counted from when they were made, or from the
// store's start for those found on disk), at most maxTombstones of them,
// and go with their object.
const (
	tombstoneRetention = time.Hour
	maxTombstones      = 1 << 20
)

func (s *Store) tombPath(k ObjKey, txid uint64, kind string) string {
	return filepath.Join(s.dir, "objects", fmt.Sprintf("%02x", k.Ino&0xff),
		fmt.Sprintf("%016x.%d.%016x.%s", k.Ino, k.Comp, txid, kind))
}

func isTombName(name string) bool {
	return strings.HasSuffix(name, "."+tombApplied) || strings.HasSuffix(name, "."+tombAborted)
}

const (
	tombApplied = "app"
	tombAborted = "abt"
)

// outcome is what became of staged write txid: tombApplied, tombAborted,
// or "" if this store knows nothing of it.
func (s *Store) outcome(k ObjKey, txid uint64) (string, error) {
	for _, kind := range []string{tombApplied, tombAborted} {
		f, err := s.fs.OpenFile(s.tombPath(k, txid, kind), os.O_RDONLY, 0)
		if err == nil {
			_ = f.Close()
			return kind, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", s.ioError(err)
		}
	}
	return "", nil
}

// settle records the outcome of txid, drops its stage and makes both
// durable (the directory synced), then collects old tombstones.
func (s *Store) settle(k ObjKey, txid uint64, kind string) error {
	path := s.tombPath(k, txid, kind)
	if err := s.fs.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return s.ioError(err)
	}
	f, err := s.fs.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return s.ioError(err)
	}
	_ = f.Close()
	if err := s.dropStage(k, txid); err != nil {
		return err
	}
	if err := s.syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	s.collectTombs(path)
	return nil
}

// collectTombs queues a new tombstone and removes those past their
// retention, or the oldest past maxTombstones.
func (s *Store) collectTombs(path string) {
	now := s.now()
	s.tombs.push(path, now)
	for _, old := range s.tombs.expired(now.Add(-tombstoneRetention), maxTombstones) {
		_ = s.fs.Remove(old) // one already gone (its object deleted) is fine
	}
}

// tombQueue holds tombstones oldest first.
type tombQueue struct {
	mu    sync.Mutex
	paths []string
	at    []time.Time
}

func (q *tombQueue) push(path string, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.paths, q.at = append(q.paths, path), append(q.at, at)
}

// expired takes the tombstones made before cutoff, and the oldest beyond
// max, off the queue.
func (q *tombQueue) expired(cutoff time.Time, max int) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < len(q.paths) && (q.at[n].Before(cutoff) || len(q.paths)-n > max) {
		n++
	}
	out := slices.Clone(q.paths[:n])
	q.paths, q.at = slices.Delete(q.paths, 0, n), slices.Delete(q.at, 0, n)
	return out
}

// Stage writes p, meant for object k at off, to a durable side file.
func (s *Store) Stage(k ObjKey, version, txid uint64, off int64, p []byte) error {
	return s.StageSegs(k, version, txid, []osdproto.Seg{{Off: off, Len: uint32(len(p))}}, p)
}

// StageSegs writes p, segments segs of object k one after another, to a
// durable side file. The caller checked that segs hold p exactly.
func (s *Store) StageSegs(k ObjKey, version, txid uint64, segs []osdproto.Seg, p []byte) error {
	_, done, err := s.lockObject(k, version, forRead) // refuse stale writers; create nothing yet
	if err != nil {
		return err
	}
	done()
	if kind, err := s.outcome(k, txid); err != nil {
		return err
	} else if kind != "" {
		return wire.Errorf(wire.ErrInvalid, "staged write %x of object %x.%d was %s already: a late copy", txid, k.Ino, k.Comp, outcomeText(kind))
	}
	format := uint16(stageFormat)
	if len(segs) > 1 || segs[0].Zero {
		format = stageFormatSegs
	}
	h := make([]byte, stageHeaderBytes)
	binary.LittleEndian.PutUint32(h[0:], stageMagic)
	binary.LittleEndian.PutUint16(h[4:], format)
	binary.LittleEndian.PutUint64(h[8:], k.Ino)
	binary.LittleEndian.PutUint32(h[16:], k.Comp)
	binary.LittleEndian.PutUint64(h[24:], txid)
	binary.LittleEndian.PutUint64(h[32:], version)
	binary.LittleEndian.PutUint64(h[40:], uint64(segs[0].Off))
	binary.LittleEndian.PutUint32(h[48:], uint32(len(p)))
	binary.LittleEndian.PutUint32(h[52:], wire.CRC(p))
	binary.LittleEndian.PutUint32(h[68:], wire.CRC(h[:68]))
	if format == stageFormatSegs {
		h = binary.LittleEndian.AppendUint32(h, uint32(len(segs)))
		for _, g := range segs {
			h = binary.LittleEndian.AppendUint64(h, uint64(g.Off))
			h = binary.LittleEndian.AppendUint32(h, g.EncodedLen())
		}
		h = binary.LittleEndian.AppendUint32(h, wire.CRC(h[stageHeaderBytes:]))
	}
	path := s.stagePath(k, txid)
	if err := s.fs.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return s.ioError(err)
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return s.ioError(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(h, 0); err != nil {
		return s.ioError(err)
	}
	if _, err := f.WriteAt(p, int64(len(h))); err != nil {
		return s.ioError(err)
	}
	if err := f.Sync(); err != nil {
		s.onFatal(fmt.Errorf("fsync stage %s: %w", path, err))
		return s.ioError(err)
	}
	return s.syncDir(filepath.Dir(path))
}

func (s *Store) syncDir(dir string) error {
	if fatal, err := syncDirOn(s.fs, dir); err != nil {
		if fatal {
			s.onFatal(fmt.Errorf("fsync directory %s: %w", dir, err))
		}
		return s.ioError(err)
	}
	return nil
}

// syncDirOn fsyncs directory dir of fsys. fatal says the fsync itself
// failed (the names it should have made durable may be lost), not the
// open.
func syncDirOn(fsys FS, dir string) (fatal bool, err error) {
	d, err := fsys.OpenFile(dir, os.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return true, err
	}
	return false, nil
}

// readStage loads and verifies a stage file: its segments and their data,
// one after another. A missing one is ErrNotFound.
func (s *Store) readStage(k ObjKey, txid uint64) (segs []osdproto.Seg, data []byte, err error) {
	path := s.stagePath(k, txid)
	f, err := s.fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, wire.Errorf(wire.ErrNotFound, "no staged write %x for object %x.%d", txid, k.Ino, k.Comp)
	}
	if err != nil {
		return nil, nil, s.ioError(err)
	}
	defer f.Close()
	h := make([]byte, stageHeaderBytes)
	if _, err := f.ReadAt(h, 0); err != nil {
		return nil, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: header unreadable: %v", path, err)
	}
	format := binary.LittleEndian.Uint16(h[4:])
	if binary.LittleEndian.Uint32(h[0:]) != stageMagic || (format != stageFormat && format != stageFormatSegs) ||
		binary.LittleEndian.Uint32(h[68:]) != wire.CRC(h[:68]) ||
		binary.LittleEndian.Uint64(h[8:]) != k.Ino || binary.LittleEndian.Uint32(h[16:]) != k.Comp ||
		binary.LittleEndian.Uint64(h[24:]) != txid {
		return nil, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: header damaged", path)
	}
	off := int64(binary.LittleEndian.Uint64(h[40:]))
	n := binary.LittleEndian.Uint32(h[48:])
	if off < 0 || n > wire.MaxDataBytes {
		return nil, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: bad extent", path)
	}
	dataAt := int64(stageHeaderBytes)
	segs = []osdproto.Seg{{Off: off, Len: n}}
	if format == stageFormatSegs {
		if segs, dataAt, err = readStageSegs(f, n); err != nil {
			return nil, nil, fmt.Errorf("stage %s: %w", path, err)
		}
	}
	data = make([]byte, n)
	if _, err := f.ReadAt(data, dataAt); err != nil && n > 0 { // a stage of only zeros has no data
		return nil, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: data unreadable: %v", path, err)
	}
	if wire.CRC(data) != binary.LittleEndian.Uint32(h[52:]) {
		return nil, nil, wire.Errorf(wire.ErrCorrupt, "stage %s: data checksum mismatch", path)
	}
	return segs, data, nil
}

// readStageSegs reads a format 2 stage's segment table, which must hold
// exactly its n bytes of data, and says where the data starts.
func readStageSegs(f File, n uint32) ([]osdproto.Seg, int64, error) {
	var nb [4]byte
	if _, err := f.ReadAt(nb[:], stageHeaderBytes); err != nil {
		return nil, 0, wire.Errorf(wire.ErrCorrupt, "segment table unreadable: %v", err)
	}
	count := binary.LittleEndian.Uint32(nb[:])
	if count == 0 || count > osdproto.MaxSegs {
		return nil, 0, wire.Errorf(wire.ErrCorrupt, "%d segments", count)
	}
	t := make([]byte, 4+12*int(count)+4)
	if _, err := f.ReadAt(t, stageHeaderBytes); err != nil {
		return nil, 0, wire.Errorf(wire.ErrCorrupt, "segment table unreadable: %v", err)
	}
	if binary.LittleEndian.Uint32(t[len(t)-4:]) != wire.CRC(t[:len(t)-4]) {
		return nil, 0, wire.Errorf(wire.ErrCorrupt, "segment table checksum mismatch")
	}
	segs := make([]osdproto.Seg, count)
	total := int64(0)
	for i := range segs {
		e := t[4+12*i:]
		segs[i] = osdproto.SegAt(int64(binary.LittleEndian.Uint64(e)), binary.LittleEndian.Uint32(e[8:]))
		if segs[i].Off < 0 || segs[i].Off > osdproto.MaxObjectBytes-int64(segs[i].Len) {
			return nil, 0, wire.Errorf(wire.ErrCorrupt, "segment %d out of range", i)
		}
		total += segs[i].DataLen()
	}
	if total != int64(n) {
		return nil, 0, wire.Errorf(wire.ErrCorrupt, "segments hold %d bytes, the stage %d", total, n)
	}
	return segs, stageHeaderBytes + int64(len(t)), nil
}

func outcomeText(kind string) string {
	if kind == tombApplied {
		return "applied"
	}
	return "aborted"
}

// Apply copies staged write txid into object k, makes it durable, then
// replaces the stage file with its tombstone. Applying twice is done; an
// aborted stage is ErrInvalid; one never staged here ErrNotFound. With
// osdproto.FlagMustExist a missing object is ErrLost (the stage stays).
func (s *Store) Apply(k ObjKey, version, txid uint64, flags uint8) (created bool, err error) {
	segs, data, err := s.readStage(k, txid)
	if errors.Is(err, wire.ErrNotFound) {
		switch kind, oerr := s.outcome(k, txid); {
		case oerr != nil:
			return false, oerr
		case kind == tombApplied:
			return false, nil
		case kind == tombAborted:
			return false, wire.Errorf(wire.ErrInvalid, "staged write %x of object %x.%d was aborted", txid, k.Ino, k.Comp)
		}
	}
	if err != nil {
		return false, err
	}
	o, done, err := s.lockObject(k, version, updateMode(flags))
	if err != nil {
		return false, err
	}
	defer done()
	created, o.fresh = o.fresh, false
	at := 0
	for _, g := range segs {
		var err error
		switch {
		case g.Zero:
			err = s.zeroLocked(o, g.Off, int64(g.Len))
		case g.Len > 0:
			err = s.writeLocked(o, g.Off, data[at:at+int(g.Len)])
		}
		if err != nil {
			return created, err
		}
		at += int(g.DataLen())
	}
	if err := s.storeFresh(o); err != nil {
		return created, err
	}
	if err := s.syncLocked(o); err != nil {
		return created, err
	}
	return created, s.settle(k, txid, tombApplied)
}

// Abort drops staged write txid, leaving its tombstone; one never staged
// here gets a tombstone too, so a late copy of it is refused. An applied
// one stays applied.
func (s *Store) Abort(k ObjKey, txid uint64) error {
	if kind, err := s.outcome(k, txid); err != nil || kind == tombApplied {
		return err
	}
	return s.settle(k, txid, tombAborted)
}

func (s *Store) dropStage(k ObjKey, txid uint64) error {
	if err := s.fs.Remove(s.stagePath(k, txid)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.ioError(err)
	}
	return nil
}

// dropStagesOf removes every stage file and tombstone of object k (on
// deletion).
func (s *Store) dropStagesOf(k ObjKey) {
	dir := filepath.Dir(s.path(k, "dat"))
	entries, err := s.fs.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := fmt.Sprintf("%016x.%d.", k.Ino, k.Comp)
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, prefix) && (strings.HasSuffix(name, ".stg") || isTombName(name)) {
			_ = s.fs.Remove(filepath.Join(dir, name))
		}
	}
}
