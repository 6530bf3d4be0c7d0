package osd

import (
	"encoding/binary"
	"os"
	"path/filepath"

	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Packed objects: the store's operations on an object whose state is an
// image in the pack (pack.go) rather than its own data and sum files.
// Each change appends a whole new image (at most packMaxBytes of data),
// so an object is never half-changed; a sync waits for the pack's group
// fsync to cover its last record. The block checksums keep the file
// store's meaning (a 0 over an all-zero block is a hole), so data maps,
// promotion to files and migration carry them over unchanged.

// imageOf is packed object o's current image; a fresh one, never
// written, is empty.
func (s *Store) imageOf(o *object) (*image, error) {
	im, err := s.pack.readImage(o.key)
	if err != nil {
		return nil, s.ioError(err)
	}
	if im == nil && o.stored.Load() {
		return nil, errGoneFromPack(o.key)
	}
	if im == nil {
		return &image{version: o.version}, nil
	}
	im.version = o.version // a raised version not stored yet
	return im, nil
}

// putImage makes im packed object o's state.
func (s *Store) putImage(o *object, im *image) error {
	seq, err := s.pack.put(o.key, im)
	if err != nil {
		return s.ioError(err)
	}
	s.usedBytes.Add(im.size() - o.size)
	o.size, o.lastSeq = im.size(), seq
	o.stored.Store(true)
	return nil
}

// errGoneFromPack: a packed object stored before is no longer in the
// pack (its record was damaged): it is lost, never read as zeros.
func errGoneFromPack(k ObjKey) error {
	return wire.Errorf(wire.ErrLost, "object %x.%d: its packed record was damaged", k.Ino, k.Comp)
}

// resize sets im's length to n: new blocks are holes, and a cut last
// block keeps a checksum of its bytes below n.
func (im *image) resize(n int64) {
	old := im.size()
	if n < old {
		im.data = im.data[:n]
	} else {
		im.data = append(im.data, make([]byte, n-old)...)
	}
	blocks := (n + blockBytes - 1) / blockBytes
	for int64(len(im.sums)) < blocks {
		im.sums = append(im.sums, 0)
	}
	im.sums = im.sums[:blocks]
	if n < old && n%blockBytes != 0 {
		im.sumBlock(n / blockBytes)
	}
}

// sumBlock sets block b's checksum from its bytes (zeros past the end).
func (im *image) sumBlock(b int64) {
	lo, hi := b*blockBytes, min((b+1)*blockBytes, im.size())
	if hi-lo == blockBytes {
		im.sums[b] = wire.CRC(im.data[lo:hi])
		return
	}
	var blk [blockBytes]byte
	copy(blk[:], im.data[lo:hi])
	im.sums[b] = wire.CRC(blk[:])
}

// packWrite stores p at off in packed object o, moving the object to
// its own files if it grows past packMaxBytes.
func (s *Store) packWrite(o *object, off int64, p []byte) error {
	end := off + int64(len(p))
	if end > packMaxBytes {
		if err := s.promote(o); err != nil {
			return err
		}
		return s.writeLocked(o, off, p)
	}
	im, err := s.imageOf(o)
	if err != nil {
		return err
	}
	if end > im.size() {
		im.resize(end)
	}
	copy(im.data[off:], p)
	for b := off / blockBytes; b*blockBytes < end; b++ {
		im.sumBlock(b)
	}
	return s.putImage(o, im)
}

// packZero makes [off, off+n) of packed object o read as zeros: whole
// blocks become holes, the blocks at the ends are rewritten.
func (s *Store) packZero(o *object, off, n int64) error {
	end := min(off+n, o.size)
	if off >= end {
		return nil
	}
	im, err := s.imageOf(o)
	if err != nil {
		return err
	}
	clear(im.data[off:end])
	for b := off / blockBytes; b*blockBytes < end; b++ {
		if lo, hi := b*blockBytes, min((b+1)*blockBytes, im.size()); lo >= off && hi <= end {
			im.sums[b] = 0
		} else {
			im.sumBlock(b)
		}
	}
	return s.putImage(o, im)
}

// packRead fills buf from off of packed object o, zeros past its end,
// after checking every block it touches.
func (s *Store) packRead(o *object, off int64, buf []byte) error {
	im, err := s.pack.readImage(o.key)
	if err != nil {
		return s.ioError(err)
	}
	if im == nil && o.stored.Load() {
		return errGoneFromPack(o.key)
	}
	if im == nil {
		im = &image{}
	}
	avail := min(int64(len(buf)), max(0, im.size()-off))
	if avail > 0 {
		if err := im.check(o.key, off/blockBytes, (off+avail-1)/blockBytes); err != nil {
			return err
		}
		copy(buf, im.data[off:off+avail])
	}
	clear(buf[max(0, avail):])
	return nil
}

// check verifies blocks b0..b1 of im against their checksums.
func (im *image) check(k ObjKey, b0, b1 int64) error {
	var blk [blockBytes]byte
	for b := b0; b <= b1 && b < int64(len(im.sums)); b++ {
		clear(blk[:])
		copy(blk[:], im.data[b*blockBytes:min((b+1)*blockBytes, im.size())])
		if got, want := wire.CRC(blk[:]), im.sums[b]; got != want && !(want == 0 && osdproto.AllZero(blk[:])) {
			return wire.Errorf(wire.ErrCorrupt, "object %x.%d block %d: checksum mismatch", k.Ino, k.Comp, b)
		}
	}
	return nil
}

// packTruncate sets packed object o's length, moving it to its own files
// if that is past packMaxBytes.
func (s *Store) packTruncate(o *object, size int64) error {
	if size > packMaxBytes {
		if err := s.promote(o); err != nil {
			return err
		}
		return s.truncateLocked(o, size)
	}
	im, err := s.imageOf(o)
	if err != nil {
		return err
	}
	if size < im.size() && size%blockBytes != 0 {
		if err := im.check(o.key, size/blockBytes, size/blockBytes); err != nil {
			return err
		}
	}
	im.resize(size)
	if err := s.putImage(o, im); err != nil {
		return err
	}
	return s.syncLocked(o)
}

// packSync makes packed object o's last record durable.
func (s *Store) packSync(o *object) error {
	if err := s.pack.waitDurable(o.lastSeq); err != nil {
		return s.ioError(err)
	}
	return nil
}

// packVersion records a newer layout version on packed object o.
func (s *Store) packVersion(o *object) error {
	if o.fresh && o.lastSeq == 0 {
		if _, ok := s.pack.lookup(o.key); !ok {
			return nil // nothing stored yet: its first image carries it
		}
	}
	im, err := s.imageOf(o)
	if err != nil {
		return err
	}
	return s.putImage(o, im)
}

// packDataMap calls set for every block of [off, end) of packed object o
// that holds data: its checksum is not a hole's, or its bytes are not
// zeros.
func (s *Store) packDataMap(o *object, off, end int64, set func(from, to int64)) error {
	im, err := s.pack.readImage(o.key)
	if err != nil || im == nil {
		return err
	}
	for b := off / blockBytes; b*blockBytes < min(end, im.size()); b++ {
		lo, hi := b*blockBytes, min((b+1)*blockBytes, im.size())
		if im.sums[b] != 0 || !osdproto.AllZero(im.data[lo:hi]) {
			set(lo, lo+blockBytes)
		}
	}
	return nil
}

// promote moves packed object o to its own files (it grows past
// packMaxBytes): the files are written and made durable first, then the
// pack's delete; a crash between leaves the pack's image the object, and
// the files are removed as leftovers (Store.Migrate).
func (s *Store) promote(o *object) error {
	im, err := s.imageOf(o)
	if err != nil {
		return err
	}
	label := s.pack.readLabel(o.key)
	if err := s.fs.MkdirAll(s.objDir(o.key), 0o700); err != nil {
		return s.ioError(err)
	}
	data, err := s.fs.OpenFile(s.path(o.key, "dat"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return s.ioError(err)
	}
	sum, err := s.fs.OpenFile(s.path(o.key, "sum"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		_ = data.Close()
		return s.ioError(err)
	}
	f := &object{key: o.key, data: data, sum: sum, version: im.version, format: sumFormat, sumBase: sumHeaderBytes + sumLabelBytes}
	if err := s.fillFiles(f, im, label); err != nil {
		f.closeFiles()
		return err
	}
	o.stored.Store(false) // leaving the pack: not gone from under the store (goneLocked)
	seq, err := s.pack.remove(o.key)
	if err == nil {
		err = s.pack.waitDurable(seq)
	}
	if err != nil {
		f.closeFiles()
		return s.ioError(err)
	}
	s.mu.Lock() // goneLocked and eviction look at an object's files under the store's lock
	o.packed, o.data, o.sum = false, data, sum
	s.mu.Unlock()
	o.format, o.sumBase, o.dirSynced, o.lastSeq = f.format, f.sumBase, true, 0
	return nil
}

// fillFiles writes image im and label into new object f's files and
// makes them and their names durable.
func (s *Store) fillFiles(f *object, im *image, label []byte) error {
	if err := f.writeHeader(); err != nil {
		return s.ioError(err)
	}
	if len(label) > 0 {
		if err := f.writeLabel(label); err != nil {
			return s.ioError(err)
		}
	}
	if len(im.data) > 0 {
		if _, err := f.data.WriteAt(im.data, 0); err != nil {
			return s.ioError(err)
		}
		sums := make([]byte, 4*len(im.sums))
		for i, v := range im.sums {
			binary.LittleEndian.PutUint32(sums[4*i:], v)
		}
		if _, err := f.sum.WriteAt(sums, f.sumBase); err != nil {
			return s.ioError(err)
		}
	}
	f.size = im.size()
	if err := s.syncLocked(f); err != nil {
		return err
	}
	return nil
}

// objDir is the directory of object k's files.
func (s *Store) objDir(k ObjKey) string {
	return filepath.Dir(s.path(k, "dat"))
}
