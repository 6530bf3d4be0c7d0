package client

// Sealed files (layout option enc=aes-gcm): the client encrypts each 4 KiB
// block before erasure coding and opens it after reading (the format is
// internal/seal's: blocks packed whole into stripe units). The file's
// public data methods (data.go) send a sealed file's calls here, where
// plaintext offsets become stored blocks, which the rest of this package
// writes, codes and reads as it does any file's bytes.
//
// A write that covers part of a block reads the block first and rewrites
// it whole, under the extent locks of the stripes it rewrites (and, when
// it reaches past the last block, of the last block's stripe, which it
// pads): another handle's write of the same block waits, as for any
// read-modify-write. The last block this handle wrote is kept while its
// locks stay with it, so appends of any size do not read back. One
// handle's writes to a sealed file take turns; a reader that meets a
// block being rewritten by another handle reads it again
// (maxSealRetries).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/braidfs/braid/internal/mdsproto"
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
	blockBytes     = seal.BlockBytes
)

// errNoKey is a sealed file opened without its key (the MDS gives none to
// the cluster's servers).
var errNoKey = fmt.Errorf("%w: the file is encrypted and this principal holds no key for it", wire.ErrDenied)

// errShortBlock is a block that opened shorter than the size promised: the
// file was cut meanwhile, and the read is tried again.
var errShortBlock = fmt.Errorf("%w: a block shorter than the file's size", seal.ErrAuth)

// sealedIO is a sealed file's encryption state.
type sealedIO struct {
	blocks *seal.Blocks
	mu     sync.RWMutex // writers (and cuts) exclusive; readers shared
	// last is the plaintext of the last block this handle wrote, when
	// it ended short of a whole block (lastIdx -1: none), as of lock
	// hand-back count lastGiven.
	last      []byte
	lastIdx   int64
	lastGiven uint64
}

func newSealedIO(key []byte) (*sealedIO, error) {
	b, err := seal.New(key)
	if err != nil {
		return nil, fmt.Errorf("%w: data key from MDS: %v", wire.ErrInternal, err)
	}
	return &sealedIO{blocks: b, lastIdx: -1}, nil
}

// blockOff is where block i is stored.
func (f *File) blockOff(i int64) int64 { return seal.StoredOffset(i, f.sealUnit) }

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

// readAtSealed is ReadAt of a sealed file.
func (f *File) readAtSealed(p []byte, off int64) (int, error) {
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
		step := min(n-done, sealChunkBlocks*blockBytes-(off+done)%blockBytes)
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
	b0, b1 := off/blockBytes, (off+int64(len(p))-1)/blockBytes
	sOff := f.blockOff(b0)
	sEnd := min(f.blockOff(b1)+seal.StoredBlockBytes, f.storedSize())
	if sEnd <= sOff {
		return errShortBlock
	}
	stored := wire.GetBuf(int(sEnd - sOff))
	defer wire.PutBuf(stored)
	if n, err := f.readAtStored(stored, sOff); int64(n) != sEnd-sOff {
		if err == nil || errors.Is(err, io.EOF) {
			return errShortBlock // cut meanwhile
		}
		return fmt.Errorf("reading %s's blocks %d-%d: %w", f.path, b0, b1, err)
	}
	var plain [blockBytes]byte
	for i := b0; i <= b1; i++ {
		at := f.blockOff(i) - sOff
		if at >= int64(len(stored)) {
			return errShortBlock
		}
		blockStored := stored[at:min(at+seal.StoredBlockBytes, int64(len(stored)))]
		start := i * blockBytes
		if start >= off && start+blockBytes <= off+int64(len(p)) {
			// A whole block the read wants: opened in place.
			got, err := f.sio.blocks.Open(p[start-off:start-off], blockStored, i)
			if err != nil {
				return err
			}
			if len(got) != blockBytes {
				return errShortBlock
			}
			continue
		}
		blk, err := f.sio.blocks.Open(plain[:0], blockStored, i)
		if err != nil {
			return err
		}
		lo, hi := max(off, start), min(off+int64(len(p)), start+blockBytes)
		if start+int64(len(blk)) < hi {
			return errShortBlock
		}
		copy(p[lo-off:hi-off], blk[lo-start:hi-start])
	}
	return nil
}

// writeAtSealed is WriteAt of a sealed file.
func (f *File) writeAtSealed(p []byte, off int64) (int, error) {
	if !f.write {
		return 0, errReadOnly
	}
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset", wire.ErrInvalid)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if lay := f.layout(); off > lay.MaxSize() || seal.StoredSize(off+int64(len(p)), f.sealUnit) > lay.MaxSize() {
		return 0, wire.Errorf(wire.ErrTooBig, "%s: write past what layout %s holds", f.path, lay.Spec)
	}
	f.sio.mu.Lock()
	defer f.sio.mu.Unlock()
	if err := f.writePlainLocked(p, off); err != nil {
		return 0, err
	}
	return len(p), nil
}

// firstBlock is the first block a write at off rewrites in a file of
// size bytes: its own, or the last block if that is short and the write
// begins past it (blocks before the last are stored whole).
func firstBlock(off, size int64) int64 {
	b := off / blockBytes
	if size%blockBytes != 0 && b > size/blockBytes {
		b = size / blockBytes
	}
	return b
}

// pinSealed pins the extent locks of the stripes holding blocks first(size)
// to last (-1: to the end of any file), the size being the one under the
// pins: the grants hand over the size other writers left, and a first
// block that size moves below the pinned ones is pinned again.
func (f *File) pinSealed(first func(size int64) int64, last int64) (func(), int64, error) {
	S := f.layout().Spec.StripeBytes()
	size := f.Size()
	for try := 0; ; try++ {
		b0 := first(size)
		lo, hi := f.blockOff(b0)/S, mdsproto.MaxStripe
		if last >= 0 {
			hi = (f.blockOff(max(last, b0))+seal.StoredBlockBytes-1)/S + 1
		}
		unpin, err := f.lockStripes(context.Background(), lo, hi)
		if err != nil {
			return nil, 0, err
		}
		size = f.Size()
		if first(size) >= b0 {
			return unpin, size, nil
		}
		unpin()
		if try == maxLockTries {
			return nil, 0, wire.Errorf(wire.ErrBusy, "%s: the file's size kept changing under its locks", f.path)
		}
	}
}

// writePlainLocked writes plaintext p at off, a chunk of blocks at a time,
// each under the locks of the stripes it rewrites. The caller holds
// sio.mu.
func (f *File) writePlainLocked(p []byte, off int64) error {
	for done := 0; done < len(p); {
		at := off + int64(done)
		step := int(min(int64(len(p)-done), sealChunkBlocks*blockBytes-at%blockBytes))
		end := at + int64(step)
		unpin, size, err := f.pinSealed(func(size int64) int64 { return firstBlock(at, size) }, (end-1)/blockBytes)
		if err != nil {
			return err
		}
		if last := size / blockBytes; size%blockBytes != 0 && at/blockBytes > last {
			// The short last block is filled with zeros first.
			err = f.rewriteBlocksLocked(nil, (last+1)*blockBytes, size)
			size = f.Size()
		}
		if err == nil {
			err = f.rewriteBlocksLocked(p[done:done+step], at, size)
		}
		unpin()
		if err != nil {
			return err
		}
		done += step
	}
	return nil
}

// rewriteBlocksLocked seals the blocks that p, written at off, touches
// (at most sealChunkBlocks) with what they held before, the file being
// size bytes long, and writes them. A nil p at off extends the block
// holding size with zeros to off. The caller holds sio.mu and the locks
// of the blocks' stripes.
func (f *File) rewriteBlocksLocked(p []byte, off, size int64) error {
	from, end := off, off+int64(len(p))
	if p == nil {
		from, end = size, off
	}
	b0, b1 := from/blockBytes, (end-1)/blockBytes
	base := f.blockOff(b0)
	out := wire.GetBuf(int(f.blockOff(b1) + seal.StoredBlockBytes - base))[:0]
	defer func() { wire.PutBuf(out) }()
	var plain [blockBytes]byte
	for i := b0; i <= b1; i++ {
		start := i * blockBytes
		held := min(max(size-start, 0), blockBytes) // plaintext the block holds now
		lo, hi := max(from, start)-start, min(end, start+blockBytes)-start
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
		if gap := int(f.blockOff(i) - base - int64(len(out))); gap > 0 {
			out = out[:len(out)+gap] // a unit's unused tail (out has room for every block)
			clear(out[len(out)-gap:])
		}
		out = f.sio.blocks.Seal(out, blk, i)
		f.sio.noteLast(blk, i, f.locks.given.Load())
	}
	n, err := f.writeAtStored(out, base)
	if err == nil && n != len(out) {
		err = io.ErrShortWrite
	}
	return err
}

// blockPlainLocked fills dst with the first len(dst) plaintext bytes of
// block i, from the last block written if it is that one and this
// handle kept its locks since.
func (f *File) blockPlainLocked(dst []byte, i int64) error {
	if len(dst) == 0 {
		return nil
	}
	s := f.sio
	if i == s.lastIdx && len(s.last) >= len(dst) && s.lastGiven == f.locks.given.Load() {
		copy(dst, s.last)
		return nil
	}
	return f.readPlain(dst, i*blockBytes)
}

// noteLast keeps block i's plaintext if it ends short of a whole block
// (the one an append continues), and forgets a kept block rewritten.
func (s *sealedIO) noteLast(blk []byte, i int64, given uint64) {
	if len(blk) == blockBytes {
		if i == s.lastIdx {
			s.lastIdx = -1
		}
		return
	}
	s.last = append(s.last[:0], blk...)
	s.lastIdx, s.lastGiven = i, given
}

// truncateSealed is Truncate of a sealed file.
func (f *File) truncateSealed(size int64) error {
	if !f.write {
		return errReadOnly
	}
	unit := f.sealUnit
	if size < 0 || seal.StoredSize(size, unit) > f.layout().MaxSize() {
		return fmt.Errorf("%w: size %d", wire.ErrInvalid, size)
	}
	f.sio.mu.Lock()
	defer f.sio.mu.Unlock()
	unpin, old, err := f.pinSealed(func(now int64) int64 { return min(size, now) / blockBytes }, -1)
	if err != nil {
		return err
	}
	defer unpin()
	switch {
	case size < old && size%blockBytes != 0:
		// The new last block is rewritten short, after a cut at its
		// start: a crash between leaves a shorter file, never a block
		// that does not open.
		keep := make([]byte, size%blockBytes)
		start := size - int64(len(keep))
		if err := f.blockPlainLocked(keep, size/blockBytes); err != nil {
			return err
		}
		f.sio.lastIdx = -1
		if err := f.truncateStored(seal.StoredSize(start, unit)); err != nil {
			return err
		}
		if err := f.rewriteBlocksLocked(keep, start, start); err != nil {
			return err
		}
		return f.Sync()
	case size < old:
		f.sio.lastIdx = -1
		return f.truncateStored(seal.StoredSize(size, unit))
	case size > old && old%blockBytes != 0:
		// The last block grows with zeros (to a whole block, or to the
		// new size if that is in it); blocks past it are holes.
		if err := f.rewriteBlocksLocked(nil, min(size, (old/blockBytes+1)*blockBytes), old); err != nil {
			return err
		}
	}
	if want := seal.StoredSize(size, unit); want != f.storedSize() {
		return f.truncateStored(want)
	}
	return f.Sync()
}

// punchSealed is PunchHole of a sealed file.
func (f *File) punchSealed(off, n int64) error {
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
	unpin, size, err := f.pinSealed(func(int64) int64 { return off / blockBytes }, -1)
	if err != nil {
		return err
	}
	defer unpin()
	end := min(off+n, size)
	if off >= end {
		return nil
	}
	f.sio.lastIdx = -1
	w0 := (off + blockBytes - 1) / blockBytes // whole blocks [w0, w1) are punched
	w1 := end / blockBytes
	if end == size {
		w1 = (size + blockBytes - 1) / blockBytes // the last block, short or not, is wholly in the range
	}
	if w0 >= w1 {
		return f.rewriteBlocksLocked(make([]byte, end-off), off, size)
	}
	if off < w0*blockBytes {
		if err := f.rewriteBlocksLocked(make([]byte, w0*blockBytes-off), off, size); err != nil {
			return err
		}
	}
	if w1*blockBytes < end {
		if err := f.rewriteBlocksLocked(make([]byte, end-w1*blockBytes), w1*blockBytes, size); err != nil {
			return err
		}
	}
	from, to := f.blockOff(w0), min(f.blockOff(w1-1)+seal.StoredBlockBytes, f.storedSize())
	return f.punchStored(from, to-from)
}
