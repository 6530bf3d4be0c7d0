package osd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

const (
	blockBytes     = 4096
	sumHeaderBytes = 64         // fixed header fields
	sumMagic       = 0x4d555342 // "BSUM"
	sumFormat      = 2
	// Format 2 reserves sumLabelBytes after the fixed header for the
	// object's label (what file and layout it belongs to, for scavenging);
	// block checksums start after it. Format 1 had no label area.
	sumLabelBytes  = 4096 - sumHeaderBytes
	maxLabelBytes  = sumLabelBytes - 8
	maxOpenObjects = 1024 // open object handles kept between requests
	// writebackEveryBytes: after this much new data an object's dirty pages
	// are handed to the disk (sync_file_range, no wait), so the fsync at
	// close finds little left and the disk works while the client writes.
	writebackEveryBytes = 8 << 20
)

// ObjKey names a component object: component Comp of file Ino.
type ObjKey struct {
	Ino  uint64
	Comp uint32
}

// object is an open component object.
type object struct {
	key       ObjKey
	mu        sync.RWMutex // writers exclusive, so readers never see a half-written block
	data, sum File         // nil while packed; changed under mu and Store.mu (promote, migrate)
	size      int64        // data file length
	version   uint64       // layout version from the sum header
	format    uint16       // sum file format
	sumBase   int64        // offset of block 0's checksum in the sum file
	unflushed int64        // bytes written since writeback was last started
	refs      int          // guarded by Store.mu
	lastUse   uint64       // guarded by Store.mu
	deleted   bool         // guarded by mu
	checked   time.Time    // when goneLocked last looked at its files; guarded by Store.mu
	dropped   bool         // its files were removed from under the store: closed at its last release; guarded by Store.mu
	dirSynced bool         // its directory entry is durable (guarded by mu)
	fresh     bool         // created and not yet written to (guarded by mu)
	packed    bool         // its state is an image in the pack, not files (packobj.go; written under mu and Store.mu, read under either)
	lastSeq   uint64       // packed: the pack append of its last record (guarded by mu)
	// stored: packed and in the pack (it has an image there). One that
	// is not there any more was made missing under the store (a damaged
	// record, compaction's forgetIn): goneLocked drops it.
	stored atomic.Bool
}

// closeFiles closes o's files, if it has them.
func (o *object) closeFiles() {
	if o.data != nil {
		_ = o.data.Close()
		_ = o.sum.Close()
	}
}

// Store holds an OSD's objects in a directory.
type Store struct {
	fs      FS
	dir     string
	onFatal func(error) // called when acknowledged data may be lost

	mu    sync.Mutex
	open  map[ObjKey]*object
	clock uint64

	direct      bool         // large aligned writes go direct (direct.go)
	usedBytes   atomic.Int64 // bytes of object data held
	directBytes atomic.Int64 // bytes written past the page cache (direct.go)

	now   func() time.Time // for the age of tombstones (stage.go)
	tombs tombQueue

	pack      *pack         // small objects (pack.go)
	unsynced  unsyncedFiles // objects in files written since their last sync (syncall.go)
	compactMu sync.Mutex    // one compaction at a time (packcompact.go)
	// packing: new objects start in the pack. Off, they start as files;
	// packed ones are read and changed all the same.
	packing bool
}

// OpenStore opens (creating if needed) the object directory under dir.
// onFatal is called when an fsync fails; it must stop the process.
func OpenStore(fsys FS, dir string, onFatal func(error)) (*Store, error) {
	s := &Store{fs: fsys, dir: dir, onFatal: onFatal, open: map[ObjKey]*object{}, now: time.Now, packing: true}
	if err := fsys.MkdirAll(filepath.Join(dir, "objects"), 0o700); err != nil {
		return nil, err
	}
	p, err := openPack(fsys, filepath.Join(dir, "pack"), packSegmentBytes, onFatal)
	if err != nil {
		return nil, fmt.Errorf("open the pack: %w", err)
	}
	s.pack = p
	used, err := s.scanUsed()
	if err != nil {
		p.close()
		return nil, err
	}
	s.usedBytes.Store(used + p.usedBytes())
	s.direct = directUseful(filepath.Join(dir, "objects"))
	return s, nil
}

// UsedBytes is the object data this store holds.
func (s *Store) UsedBytes() int64 { return s.usedBytes.Load() }

func (s *Store) scanUsed() (int64, error) {
	var used int64
	root := filepath.Join(s.dir, "objects")
	subdirs, err := s.fs.ReadDir(root)
	if err != nil {
		return 0, err
	}
	for _, sd := range subdirs {
		entries, err := s.fs.ReadDir(filepath.Join(root, sd.Name()))
		if err != nil {
			continue
		}
		leftovers := false
		for _, e := range entries {
			if k, ok := ParseObjectName(e.Name()); ok && s.packed(k) {
				// A move into or out of the pack that a crash cut short:
				// the pack's image is the object, the files leftovers.
				if err := s.removeObjectFiles(k); err != nil {
					return 0, err
				}
				leftovers = true
			} else if ok {
				if fi, err := e.Info(); err == nil {
					used += fi.Size()
				}
			}
			if isTombName(e.Name()) {
				// Kept a retention from now: their age before the start
				// is not known.
				s.tombs.push(filepath.Join(root, sd.Name(), e.Name()), s.now())
			}
		}
		if leftovers {
			if err := s.syncDir(filepath.Join(root, sd.Name())); err != nil {
				return 0, err
			}
		}
	}
	return used, nil
}

// packed reports whether object k is in the pack: then any files of it
// are leftovers of a move that did not finish (promote, Migrate).
func (s *Store) packed(k ObjKey) bool {
	_, ok := s.pack.lookup(k)
	return ok
}

// SetPacking says whether new objects start in the pack (the default) or
// as files of their own.
func (s *Store) SetPacking(on bool) { s.packing = on }

func (s *Store) path(k ObjKey, ext string) string {
	return filepath.Join(s.dir, "objects", fmt.Sprintf("%02x", k.Ino&0xff),
		fmt.Sprintf("%016x.%d.%s", k.Ino, k.Comp, ext))
}

// ParseObjectName reads an object data file name back into its key.
func ParseObjectName(name string) (ObjKey, bool) {
	base, ok := strings.CutSuffix(name, ".dat")
	if !ok {
		return ObjKey{}, false
	}
	inoHex, compText, ok := strings.Cut(base, ".")
	ino, err1 := strconv.ParseUint(inoHex, 16, 64)
	comp, err2 := strconv.ParseUint(compText, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return ObjKey{}, false
	}
	return ObjKey{Ino: ino, Comp: uint32(comp)}, true
}

// checkVersion refuses requests made under an older layout, and records a
// newer one on write.
func (s *Store) checkVersion(o *object, version uint64, write bool) error {
	if version < o.version {
		return wire.Errorf(wire.ErrStale, "object %x.%d is at layout version %d, request has %d", o.key.Ino, o.key.Comp, o.version, version)
	}
	if write && version > o.version {
		o.version = version
		if o.packed {
			return s.packVersion(o)
		}
		return o.writeHeader()
	}
	return nil
}

func (s *Store) ioError(err error) error {
	var c wire.Code
	if errors.As(err, &c) {
		return err
	}
	if isNoSpace(err) {
		return fmt.Errorf("%w: %v", wire.ErrNoSpace, err)
	}
	return fmt.Errorf("%w: %v", wire.ErrInternal, err)
}

// lockMode says how an operation holds an object.
type lockMode int

const (
	forRead           lockMode = iota // shared lock; a missing object is not created
	forSync                           // exclusive; a missing object is not created; newer versions recorded
	forUpdate                         // exclusive; created if missing; newer versions recorded
	forUpdateExisting                 // exclusive; missing is ErrLost; newer versions recorded
)

// updateMode is how a Write, Truncate or Apply with request flags holds
// its object: one that must exist is never created.
func updateMode(flags uint8) lockMode {
	if flags&osdproto.FlagMustExist != 0 {
		return forUpdateExisting
	}
	return forUpdate
}

// lockObject acquires object k, takes its lock and checks the request's
// layout version. done releases both. A missing object (not created)
// comes back as nil with a no-op done.
func (s *Store) lockObject(k ObjKey, version uint64, mode lockMode) (o *object, done func(), err error) {
	o, err = s.acquire(k, mode == forUpdate, version)
	if err != nil {
		return nil, nil, s.ioError(err)
	}
	if o == nil && mode == forUpdateExisting {
		return nil, nil, wire.Errorf(wire.ErrLost, "object %016x.%d is missing, and its writer knows it holds data", k.Ino, k.Comp)
	}
	if o == nil {
		return nil, func() {}, nil
	}
	if mode == forRead {
		o.mu.RLock()
		done = func() { o.mu.RUnlock(); s.release(o) }
	} else {
		o.mu.Lock()
		done = func() { o.mu.Unlock(); s.release(o) }
	}
	if o.deleted {
		done()
		return nil, nil, errDeleted(k)
	}
	if err := s.checkVersion(o, version, mode != forRead); err != nil {
		done()
		return nil, nil, err
	}
	return o, done, nil
}

// Write stores p at off in object k, then fsyncs it if flags ask
// (osdproto.FlagSync); with osdproto.FlagMustExist a missing object is
// ErrLost, not created. It reports whether the write created the object.
func (s *Store) Write(k ObjKey, version uint64, off int64, p []byte, flags uint8) (created bool, err error) {
	sync := flags&osdproto.FlagSync != 0
	o, done, err := s.lockObject(k, version, updateMode(flags))
	if err != nil {
		return false, err
	}
	defer done()
	created, o.fresh = o.fresh, false
	if len(p) > 0 {
		if err := s.writeLocked(o, off, p); err != nil {
			return created, err
		}
	} else if err := s.storeFresh(o); err != nil {
		return created, err
	}
	return created, s.afterWrite(o, sync)
}

func (s *Store) writeLocked(o *object, off int64, p []byte) error {
	if o.packed {
		return s.packWrite(o, off, p)
	}
	end := off + int64(len(p))
	b0, b1 := off/blockBytes, (end-1)/blockBytes
	sums := make([]byte, 4*(b1-b0+1))
	for b := b0; b <= b1; b++ {
		bs, be := b*blockBytes, (b+1)*blockBytes
		var crc uint32
		if bs >= off && be <= end {
			crc = wire.CRC(p[bs-off : be-off])
		} else {
			blk, err := s.mergeBlock(o, b, off, p)
			if err != nil {
				return err
			}
			crc = wire.CRC(blk)
		}
		binary.LittleEndian.PutUint32(sums[4*(b-b0):], crc)
	}
	direct, err := writeData(o.data, p, off, s.direct)
	s.directBytes.Add(direct)
	if err != nil {
		s.refreshSize(o)
		return s.ioError(err)
	}
	if _, err := o.sum.WriteAt(sums, o.sumBase+4*b0); err != nil {
		return s.ioError(err)
	}
	if end > o.size {
		s.usedBytes.Add(end - o.size)
		o.size = end
	}
	if o.unflushed += int64(len(p)) - direct; o.unflushed >= writebackEveryBytes {
		o.unflushed = 0
		startWriteback(o.data)
	}
	return nil
}

// zeroLocked makes [off, off+n) of object o read as zeros, keeping its
// length (nothing past the end needs zeroing): the blocks wholly inside
// are deallocated and their checksums set to 0, a hole's; the blocks at
// the ends are rewritten. A crash half-way leaves blocks whose checksum
// disagrees with their bytes, which read as corrupt (never as data)
// until the stage is applied again.
func (s *Store) zeroLocked(o *object, off, n int64) error {
	if o.packed {
		return s.packZero(o, off, n)
	}
	end := min(off+n, o.size)
	if off >= end {
		return nil
	}
	b0, b1 := (off+blockBytes-1)/blockBytes, end/blockBytes
	if end == o.size {
		b1 = (end + blockBytes - 1) / blockBytes // the last block is zero past the end already
	}
	if b0 >= b1 {
		return s.writeLocked(o, off, make([]byte, end-off))
	}
	if head := b0*blockBytes - off; head > 0 {
		if err := s.writeLocked(o, off, make([]byte, head)); err != nil {
			return err
		}
	}
	if tail := end - b1*blockBytes; tail > 0 {
		if err := s.writeLocked(o, b1*blockBytes, make([]byte, tail)); err != nil {
			return err
		}
	}
	zeros := make([]byte, 4*min(b1-b0, zeroChunkBytes/4))
	for b := b0; b < b1; b += int64(len(zeros)) / 4 {
		nb := min(int64(len(zeros))/4, b1-b)
		if _, err := o.sum.WriteAt(zeros[:4*nb], o.sumBase+4*b); err != nil {
			return s.ioError(err)
		}
	}
	from := b0 * blockBytes
	if err := punch(o.data, from, min(b1*blockBytes, o.size)-from); err != nil {
		return s.ioError(err)
	}
	return nil
}

// mergeBlock returns block b as it will be after writing p at off: the
// existing bytes (verified) overlaid with the part of p that falls in it.
func (s *Store) mergeBlock(o *object, b, off int64, p []byte) ([]byte, error) {
	blk := make([]byte, blockBytes)
	bs := b * blockBytes
	if bs < o.size {
		if err := s.readBlocks(o, b, blk); err != nil {
			return nil, err
		}
	}
	from := max(off, bs)
	to := min(off+int64(len(p)), bs+blockBytes)
	copy(blk[from-bs:to-bs], p[from-off:to-off])
	return blk, nil
}

// storeFresh stores an empty image of packed object o if it was never
// written: an object made by a request exists after it, as a file
// store's empty files do.
func (s *Store) storeFresh(o *object) error {
	if !o.packed || o.lastSeq > 0 || s.packed(o.key) {
		return nil
	}
	return s.putImage(o, &image{version: o.version})
}

func (s *Store) refreshSize(o *object) {
	if fi, err := o.data.Stat(); err == nil {
		s.usedBytes.Add(fi.Size() - o.size)
		o.size = fi.Size()
	}
}

// readBlocks reads whole blocks starting at block b into buf (a multiple of
// blockBytes), zero past the end of the data, and verifies each checksum.
func (s *Store) readBlocks(o *object, b int64, buf []byte) error {
	bs := b * blockBytes
	n := min(int64(len(buf)), max(0, o.size-bs))
	if n > 0 {
		if _, err := o.data.ReadAt(buf[:n], bs); err != nil && !errors.Is(err, io.EOF) {
			return s.ioError(err)
		}
	}
	clear(buf[n:])
	nb := int64(len(buf)) / blockBytes
	sums := make([]byte, 4*nb)
	if m, err := o.sum.ReadAt(sums, o.sumBase+4*b); err != nil && !errors.Is(err, io.EOF) {
		return s.ioError(err)
	} else {
		clear(sums[m:])
	}
	for i := int64(0); i < nb; i++ {
		blk := buf[i*blockBytes : (i+1)*blockBytes]
		want := binary.LittleEndian.Uint32(sums[4*i:])
		if got := wire.CRC(blk); got != want && !(want == 0 && osdproto.AllZero(blk)) {
			return wire.Errorf(wire.ErrCorrupt, "object %x.%d block %d: checksum mismatch", o.key.Ino, o.key.Comp, b+i)
		}
	}
	return nil
}

// Read fills buf from off in object k, zeros past its end, after verifying
// every block it touches. It returns the object's length and version.
func (s *Store) Read(k ObjKey, version uint64, off int64, buf []byte) (int64, uint64, error) {
	o, done, err := s.lockObject(k, version, forRead)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	if o == nil {
		clear(buf)
		return 0, 0, nil
	}
	if err := s.readLocked(o, off, buf); err != nil {
		return 0, 0, err
	}
	return o.size, o.version, nil
}

func (s *Store) readLocked(o *object, off int64, buf []byte) error {
	if o.packed {
		return s.packRead(o, off, buf)
	}
	avail := min(int64(len(buf)), max(0, o.size-off))
	if avail == 0 {
		clear(buf)
		return nil
	}
	as := off / blockBytes * blockBytes
	ae := (off + avail + blockBytes - 1) / blockBytes * blockBytes
	if as == off && ae-as <= int64(len(buf)) {
		if err := s.readBlocks(o, as/blockBytes, buf[:ae-as]); err != nil {
			return err
		}
		clear(buf[ae-as:])
		return nil
	}
	tmp := wire.GetBuf(int(ae - as))
	defer wire.PutBuf(tmp)
	if err := s.readBlocks(o, as/blockBytes, tmp); err != nil {
		return err
	}
	n := copy(buf, tmp[off-as:])
	clear(buf[n:])
	return nil
}

func (s *Store) syncLocked(o *object) error {
	if o.packed {
		return s.packSync(o)
	}
	if !o.dirSynced {
		// A new object's name must survive a crash as well as its bytes.
		if err := s.syncDir(filepath.Dir(s.path(o.key, "dat"))); err != nil {
			return err
		}
		o.dirSynced = true
	}
	if err := o.data.Sync(); err != nil {
		s.onFatal(fmt.Errorf("fsync %x.%d data: %w", o.key.Ino, o.key.Comp, err))
		return s.ioError(err)
	}
	if err := o.sum.Sync(); err != nil {
		s.onFatal(fmt.Errorf("fsync %x.%d checksums: %w", o.key.Ino, o.key.Comp, err))
		return s.ioError(err)
	}
	s.notedSynced(o.key)
	return nil
}

// Sync makes object k durable. A missing object has nothing to sync.
func (s *Store) Sync(k ObjKey, version uint64) error {
	o, done, err := s.lockObject(k, version, forSync)
	if err != nil || o == nil {
		return err
	}
	defer done()
	return s.syncLocked(o)
}

// Truncate sets object k's length, keeping the last block's checksum
// true (osdproto.FlagMustExist: a missing object is ErrLost). It reports
// whether it created the object.
func (s *Store) Truncate(k ObjKey, version uint64, size int64, flags uint8) (created bool, err error) {
	o, done, err := s.lockObject(k, version, updateMode(flags))
	if err != nil {
		return false, err
	}
	defer done()
	created, o.fresh = o.fresh, false
	if err := s.truncateLocked(o, size); err != nil {
		return created, err
	}
	return created, s.afterWrite(o, false)
}

func (s *Store) truncateLocked(o *object, size int64) error {
	if o.packed {
		return s.packTruncate(o, size)
	}
	if size < o.size && size%blockBytes != 0 {
		// The tail block keeps its bytes below size; the rest become zeros.
		b := size / blockBytes
		blk := make([]byte, blockBytes)
		if err := s.readBlocks(o, b, blk); err != nil {
			return err
		}
		clear(blk[size-b*blockBytes:])
		var e [4]byte
		binary.LittleEndian.PutUint32(e[:], wire.CRC(blk))
		if _, err := o.sum.WriteAt(e[:], o.sumBase+4*b); err != nil {
			return s.ioError(err)
		}
	}
	if err := o.data.Truncate(size); err != nil {
		return s.ioError(err)
	}
	if size < o.size {
		blocks := (size + blockBytes - 1) / blockBytes
		if err := o.sum.Truncate(o.sumBase + 4*blocks); err != nil {
			return s.ioError(err)
		}
	}
	s.usedBytes.Add(size - o.size)
	o.size = size
	return s.syncLocked(o)
}

// Stat reports object k's length and layout version (0, 0 if missing).
func (s *Store) Stat(k ObjKey) (int64, uint64, error) {
	o, err := s.acquire(k, false, 0)
	if err != nil || o == nil {
		return 0, 0, err
	}
	defer s.release(o)
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.deleted {
		return 0, 0, nil
	}
	return o.size, o.version, nil
}

// Close closes every open handle.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, o := range s.open {
		o.closeFiles()
		delete(s.open, k)
	}
	s.pack.close()
}
