package braid

// Sealed files (layout option enc=aes-gcm): the client encrypts each 4 KiB
// block before erasure coding and opens it after reading (the format is
// internal/seal's). The methods below are the file's public data methods;
// for a sealed file they translate plaintext offsets into blocks of the
// stored (encrypted) bytes, which the rest of this package writes, codes
// and reads as it does any file's. Writes that cover part of a block read
// it first (the last block this handle wrote is kept, so appends of any
// size do not read back); one handle's writes to a sealed file take turns.
//
// Several handles writing parts of the same 4 KiB block at once may lose
// one's bytes: each rewrites the whole block. Writers of one sealed file
// must write whole blocks, or not at once. A reader that meets a block
// being rewritten reads it again (maxSealRetries).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/braidfs/braid/internal/seal"
	"github.com/braidfs/braid/internal/wire"
)

const (
	// sealChunkBlocks bounds the blocks one step of a read or write
	// handles (1 MiB of plaintext, and its ciphertext, in memory).
	sealChunkBlocks = 256
	// maxSealRetries is how often a read re-reads a block that does not
	// open before answering with the error.
	maxSealRetries = 2
)

// errNoKey is a sealed file opened without its key (the MDS gives none to
// the cluster's servers).
var errNoKey = fmt.Errorf("%w: the file is encrypted and this principal holds no key for it", wire.ErrDenied)

// sealedIO is a sealed file's encryption state.
type sealedIO struct {
	blocks *seal.Blocks
	mu     sync.RWMutex // writers (and cuts) exclusive; readers shared
	// last is the plaintext of the last block this handle wrote, when
	// it ended short of a whole block (lastIdx -1: none).
	last    []byte
	lastIdx int64
}

func newSealedIO(key []byte) (*sealedIO, error) {
	b, err := seal.New(key)
	if err != nil {
		return nil, fmt.Errorf("%w: data key from MDS: %v", wire.ErrInternal, err)
	}
	return &sealedIO{blocks: b, lastIdx: -1}, nil
}

// sealed reports whether the file is encrypted, and refuses its data to a
// handle without the key.
func (f *File) sealed() (bool, error) {
	if f.sio != nil {
		return true, nil
	}
	if f.isSealed {
		return true, errNoKey
	}
	return false, nil
}

// Size is the file's size as this handle sees it. It does not wait for
// the handle's lock, which a flush holds for as long as it reads and
// sends (a mount's lookups and getattr ask for a writer's size).
func (f *File) Size() int64 {
	if f.isSealed {
		return seal.PlainSize(f.storedSize())
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
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", wire.ErrInvalid)
	}
	f.sio.mu.RLock()
	defer f.sio.mu.RUnlock()
	size := f.Size()
	if off >= size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), size-off)
	for done := int64(0); done < n; {
		step := min(n-done, sealChunkBlocks*seal.BlockBytes-(off+done)%seal.BlockBytes)
		if err := f.readPlain(p[done:done+step], off+done); err != nil {
			return int(done), err
		}
		done += step
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// readPlain fills p with the plaintext at off (below the size, at most
// sealChunkBlocks blocks), reading again a block that does not open.
func (f *File) readPlain(p []byte, off int64) error {
	var err error
	for try := 0; try <= maxSealRetries; try++ {
		if err = f.readPlainOnce(p, off); !errors.Is(err, seal.ErrAuth) {
			return err
		}
	}
	return fmt.Errorf("%w: %s at %d: %v", wire.ErrCorrupt, f.path, off, err)
}

func (f *File) readPlainOnce(p []byte, off int64) error {
	b0, b1 := off/seal.BlockBytes, (off+int64(len(p))-1)/seal.BlockBytes
	sOff := b0 * seal.StoredBlockBytes
	sEnd := min((b1+1)*seal.StoredBlockBytes, f.storedSize())
	stored := wire.GetBuf(int(sEnd - sOff))
	defer wire.PutBuf(stored)
	if n, err := f.readAtStored(stored, sOff); int64(n) != sEnd-sOff {
		return fmt.Errorf("reading %s's blocks %d-%d: %d of %d bytes: %w", f.path, b0, b1, n, sEnd-sOff, orEOF(err))
	}
	var plain [seal.BlockBytes]byte
	for i := b0; i <= b1; i++ {
		at := (i - b0) * seal.StoredBlockBytes
		blockStored := stored[at:min(at+seal.StoredBlockBytes, int64(len(stored)))]
		start := i * seal.BlockBytes
		if start >= off && start+seal.BlockBytes <= off+int64(len(p)) {
			// A whole block the read wants: opened in place.
			if _, err := f.sio.blocks.Open(p[start-off:start-off], blockStored, i); err != nil {
				return err
			}
			continue
		}
		blk, err := f.sio.blocks.Open(plain[:0], blockStored, i)
		if err != nil {
			return err
		}
		lo, hi := max(off, start), min(off+int64(len(p)), start+int64(len(blk)))
		if hi > lo {
			copy(p[lo-off:hi-off], blk[lo-start:hi-start])
		}
	}
	return nil
}

func orEOF(err error) error {
	if err == nil {
		return io.ErrUnexpectedEOF
	}
	return err
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
	if !f.write {
		return 0, errReadOnly
	}
	if off < 0 || off > f.layout().MaxSize()-int64(len(p)) {
		return 0, fmt.Errorf("%w: write of %d bytes at %d", wire.ErrInvalid, len(p), off)
	}
	f.sio.mu.Lock()
	defer f.sio.mu.Unlock()
	if err := f.writePlainLocked(p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writePlainLocked writes plaintext p at off, a chunk of blocks at a time.
// The caller holds sio.mu.
func (f *File) writePlainLocked(p []byte, off int64) error {
	size := f.Size()
	// A write past a last block that is not whole first fills that block
	// with zeros: blocks before the last are stored whole.
	if last := size / seal.BlockBytes; size%seal.BlockBytes != 0 && off/seal.BlockBytes > last {
		if err := f.rewriteBlocksLocked(nil, last*seal.BlockBytes+seal.BlockBytes, size); err != nil {
			return err
		}
		size = f.Size()
	}
	for done := 0; done < len(p); {
		at := off + int64(done)
		step := int(min(int64(len(p)-done), sealChunkBlocks*seal.BlockBytes-at%seal.BlockBytes))
		if err := f.rewriteBlocksLocked(p[done:done+step], at, size); err != nil {
			return err
		}
		done += step
		size = max(size, at+int64(step))
	}
	return nil
}

// rewriteBlocksLocked seals the blocks that p, written at off, touches
// (at most sealChunkBlocks) with what they held before, the file being
// size bytes long, and writes them. A nil p at off extends the block
// holding size with zeros to off.
func (f *File) rewriteBlocksLocked(p []byte, off, size int64) error {
	end := off + int64(len(p))
	from := off
	if p == nil {
		from, end = size, off
	}
	b0, b1 := from/seal.BlockBytes, (end-1)/seal.BlockBytes
	out := wire.GetBuf(int((b1 - b0 + 1) * seal.StoredBlockBytes))[:0]
	defer func() { wire.PutBuf(out) }()
	var plain [seal.BlockBytes]byte
	for i := b0; i <= b1; i++ {
		start := i * seal.BlockBytes
		held := min(max(size-start, 0), seal.BlockBytes) // plaintext the block holds now
		lo, hi := max(from, start)-start, min(end, start+seal.BlockBytes)-start
		blk := plain[:max(hi, held)]
		if lo > 0 || hi < held {
			if err := f.blockPlainLocked(blk[:held], i); err != nil {
				return err
			}
		}
		clear(blk[held:])
		if p != nil {
			copy(blk[lo:hi], p[start+lo-off:start+hi-off])
		}
		out = f.sio.blocks.Seal(out, blk, i)
		f.sio.noteLast(blk, i)
	}
	n, err := f.writeAtStored(out, b0*seal.StoredBlockBytes)
	if err == nil && n != len(out) {
		err = io.ErrShortWrite
	}
	return err
}

// blockPlainLocked fills dst with the first len(dst) plaintext bytes of
// block i, from the last block written if it is that one.
func (f *File) blockPlainLocked(dst []byte, i int64) error {
	if len(dst) == 0 {
		return nil
	}
	if i == f.sio.lastIdx && len(f.sio.last) >= len(dst) {
		copy(dst, f.sio.last)
		return nil
	}
	return f.readPlain(dst, i*seal.BlockBytes)
}

// noteLast keeps block i's plaintext if it ends short of a whole block
// (the one an append continues), and forgets a kept block rewritten.
func (s *sealedIO) noteLast(blk []byte, i int64) {
	if len(blk) == seal.BlockBytes {
		if i == s.lastIdx {
			s.lastIdx = -1
		}
		return
	}
	s.last = append(s.last[:0], blk...)
	s.lastIdx = i
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
	if !f.write {
		return 0, errReadOnly
	}
	f.sio.mu.Lock()
	defer f.sio.mu.Unlock()
	if f.storedSize() > 0 {
		// Over existing data: block by block, each as a write.
		buf := make([]byte, sealChunkBlocks*seal.BlockBytes)
		var total int64
		for {
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				if werr := f.writePlainLocked(buf[:n], total); werr != nil {
					return total, werr
				}
				total += int64(n)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return total, nil
			}
			if err != nil {
				return total, err
			}
		}
	}
	sr := &sealingReader{r: r, blocks: f.sio.blocks}
	_, err := f.readFromStored(sr)
	if sr.err != nil && !errors.Is(sr.err, io.EOF) {
		err = sr.err
	}
	return sr.plain, err
}

// sealingReader reads plaintext from r and yields it sealed, block by
// block from block 0.
type sealingReader struct {
	r      io.Reader
	blocks *seal.Blocks
	idx    int64
	plain  int64 // plaintext bytes read
	buf    []byte
	out    []byte // sealed bytes not yet read
	err    error  // r's, once it ended
}

func (s *sealingReader) Read(p []byte) (int, error) {
	if len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.buf == nil {
			s.buf = make([]byte, seal.BlockBytes, seal.StoredBlockBytes*2)
		}
		var plain [seal.BlockBytes]byte
		n, err := io.ReadFull(s.r, plain[:])
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		s.err = err
		if n == 0 {
			return 0, s.err
		}
		s.plain += int64(n)
		s.out = s.blocks.Seal(s.buf[:0], plain[:n], s.idx)
		s.idx++
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
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
	f.sio.mu.RLock()
	defer f.sio.mu.RUnlock()
	ow := &openingWriter{w: w, blocks: f.sio.blocks}
	_, err := f.writeToStored(ow)
	if err == nil {
		err = ow.flush()
	}
	return ow.plain, err
}

// openingWriter takes a sealed file's stored bytes in order from block 0
// and writes their plaintext to w, one Write per Write it is given.
type openingWriter struct {
	w      io.Writer
	blocks *seal.Blocks
	idx    int64
	plain  int64  // plaintext bytes written to w
	part   []byte // stored bytes of a block not yet whole
	out    []byte // plaintext of the current Write
}

func (o *openingWriter) Write(p []byte) (int, error) {
	n := len(p)
	// Room for all of it: the cipher appends by exact sizes, which
	// would copy what is already out once per block.
	o.out = slices.Grow(o.out[:0], (len(o.part)+len(p))/seal.StoredBlockBytes*seal.BlockBytes+seal.BlockBytes)
	if len(o.part) > 0 {
		take := min(len(p), seal.StoredBlockBytes-len(o.part))
		o.part = append(o.part, p[:take]...)
		p = p[take:]
		if len(o.part) < seal.StoredBlockBytes {
			return n, nil
		}
		if err := o.open(o.part); err != nil {
			return 0, err
		}
		o.part = o.part[:0]
	}
	for len(p) >= seal.StoredBlockBytes {
		if err := o.open(p[:seal.StoredBlockBytes]); err != nil {
			return 0, err
		}
		p = p[seal.StoredBlockBytes:]
	}
	o.part = append(o.part, p...)
	return n, o.emit()
}

// open appends one block's plaintext to out.
func (o *openingWriter) open(stored []byte) error {
	out, err := o.blocks.Open(o.out, stored, o.idx)
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrCorrupt, err)
	}
	o.out = out
	o.idx++
	return nil
}

func (o *openingWriter) emit() error {
	if len(o.out) == 0 {
		return nil
	}
	n, err := o.w.Write(o.out)
	o.plain += int64(n)
	return err
}

// flush opens the last, short block.
func (o *openingWriter) flush() error {
	if len(o.part) == 0 {
		return nil
	}
	o.out = o.out[:0]
	if err := o.open(o.part); err != nil {
		return err
	}
	o.part = o.part[:0]
	return o.emit()
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
	if !f.write {
		return errReadOnly
	}
	if size < 0 || seal.StoredSize(size) > f.layout().MaxSize() {
		return fmt.Errorf("%w: size %d", wire.ErrInvalid, size)
	}
	f.sio.mu.Lock()
	defer f.sio.mu.Unlock()
	old := f.Size()
	switch {
	case size < old && size%seal.BlockBytes != 0:
		// The new last block is rewritten short, after a cut at its
		// start: a crash between leaves a shorter file, never a block
		// that does not open.
		keep := make([]byte, size%seal.BlockBytes)
		if err := f.blockPlainLocked(keep, size/seal.BlockBytes); err != nil {
			return err
		}
		f.sio.lastIdx = -1
		if err := f.truncateStored(seal.StoredSize(size - int64(len(keep)))); err != nil {
			return err
		}
		if err := f.rewriteBlocksLocked(keep, size-int64(len(keep)), size-int64(len(keep))); err != nil {
			return err
		}
		return f.Sync()
	case size < old:
		f.sio.lastIdx = -1
		return f.truncateStored(seal.StoredSize(size))
	case size > old && old%seal.BlockBytes != 0:
		// The last block grows with zeros (to a whole block, or to the
		// new size if that is in it); blocks past it are holes.
		if err := f.rewriteBlocksLocked(nil, min(size, (old/seal.BlockBytes+1)*seal.BlockBytes), old); err != nil {
			return err
		}
	}
	if seal.StoredSize(size) != f.storedSize() {
		return f.truncateStored(seal.StoredSize(size))
	}
	return f.Sync()
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
	if !f.write {
		return errReadOnly
	}
	if off < 0 || n <= 0 || off > f.layout().MaxSize()-n {
		return fmt.Errorf("%w: punch of %d bytes at %d", wire.ErrInvalid, n, off)
	}
	f.sio.mu.Lock()
	defer f.sio.mu.Unlock()
	if f.closed {
		return os.ErrClosed
	}
	size := f.Size()
	end := min(off+n, size)
	if off >= end {
		return nil
	}
	f.sio.lastIdx = -1
	B := int64(seal.BlockBytes)
	w0 := (off + B - 1) / B // whole blocks [w0, w1) are punched
	w1 := end / B
	if end == size {
		w1 = (size + B - 1) / B // the last block, short or not, is wholly in the range
	}
	if w0 >= w1 {
		return f.writePlainLocked(make([]byte, end-off), off)
	}
	if off < w0*B {
		if err := f.writePlainLocked(make([]byte, w0*B-off), off); err != nil {
			return err
		}
	}
	if w1*B < end {
		if err := f.writePlainLocked(make([]byte, end-w1*B), w1*B); err != nil {
			return err
		}
	}
	from, to := w0*seal.StoredBlockBytes, min(w1*seal.StoredBlockBytes, f.storedSize())
	return f.punchStored(from, to-from)
}
