package client

// Whole sealed files as streams: ReadFrom seals blocks as they arrive and
// WriteTo opens them as they are read, each on top of the stored stream
// (blocks packed into units, each unit's unused tail as zeros).

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/braidfs/braid/internal/seal"
	"github.com/braidfs/braid/internal/wire"
)

// readFromSealed is ReadFrom of a sealed file.
func (f *File) readFromSealed(r io.Reader) (int64, error) {
	if !f.write {
		return 0, errReadOnly
	}
	f.sio.mu.Lock()
	defer f.sio.mu.Unlock()
	if f.storedSize() > 0 {
		return f.readFromOver(r)
	}
	sr := &sealingReader{r: r, blocks: f.sio.blocks, unit: f.sealUnit}
	_, err := f.readFromStored(sr)
	if sr.err != nil && !errors.Is(sr.err, io.EOF) {
		err = sr.err
	}
	return sr.plain, err
}

// readFromOver copies r over a sealed file's existing data, a chunk of
// blocks at a time, each as a write.
func (f *File) readFromOver(r io.Reader) (int64, error) {
	buf := make([]byte, sealChunkBlocks*blockBytes)
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

// sealingReader reads plaintext from r and yields the stored stream of
// its blocks from block 0.
type sealingReader struct {
	r      io.Reader
	blocks *seal.Blocks
	unit   int64
	idx    int64
	plain  int64 // plaintext bytes read
	buf    []byte
	out    []byte // stored bytes not yet read
	err    error  // r's, once it ended
}

func (s *sealingReader) Read(p []byte) (int, error) {
	if len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		var plain [blockBytes]byte
		n, err := io.ReadFull(s.r, plain[:])
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = io.EOF
		}
		s.err = err
		if n == 0 {
			return 0, s.err
		}
		s.plain += int64(n)
		// A unit's unused tail before the block that starts the next.
		gap := int(seal.GapBefore(s.idx, s.unit))
		s.buf = slices.Grow(s.buf[:0], gap+seal.StoredBlockBytes)[:gap]
		clear(s.buf)
		s.out = s.blocks.Seal(s.buf, plain[:n], s.idx)
		s.buf = s.out
		s.idx++
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// writeToSealed is WriteTo of a sealed file.
func (f *File) writeToSealed(w io.Writer) (int64, error) {
	f.sio.mu.RLock()
	defer f.sio.mu.RUnlock()
	ow := &openingWriter{w: w, blocks: f.sio.blocks, unit: f.sealUnit}
	_, err := f.writeToStored(ow)
	if err == nil {
		err = ow.flush()
	}
	return ow.plain, err
}

// openingWriter takes a sealed file's stored stream in order from block
// 0 and writes its plaintext to w, one Write per Write it is given.
type openingWriter struct {
	w      io.Writer
	blocks *seal.Blocks
	unit   int64
	idx    int64
	skip   int64  // bytes of a unit's unused tail still to pass
	plain  int64  // plaintext bytes written to w
	part   []byte // stored bytes of a block not yet whole
	out    []byte // plaintext of the current Write
}

func (o *openingWriter) Write(p []byte) (int, error) {
	n := len(p)
	// Room for all of it: the cipher appends by exact sizes, which
	// would copy what is already out once per block.
	o.out = slices.Grow(o.out[:0], (len(o.part)+len(p))/seal.StoredBlockBytes*blockBytes+blockBytes)
	for len(p) > 0 {
		if o.skip > 0 {
			k := min(o.skip, int64(len(p)))
			p, o.skip = p[k:], o.skip-k
			continue
		}
		if len(o.part) == 0 && len(p) >= seal.StoredBlockBytes {
			if err := o.open(p[:seal.StoredBlockBytes]); err != nil {
				return 0, err
			}
			p = p[seal.StoredBlockBytes:]
			continue
		}
		take := min(len(p), seal.StoredBlockBytes-len(o.part))
		o.part = append(o.part, p[:take]...)
		p = p[take:]
		if len(o.part) == seal.StoredBlockBytes {
			if err := o.open(o.part); err != nil {
				return 0, err
			}
			o.part = o.part[:0]
		}
	}
	return n, o.emit()
}

// open appends one block's plaintext to out and notes the unit tail that
// follows it, if it ends a unit's blocks.
func (o *openingWriter) open(stored []byte) error {
	out, err := o.blocks.Open(o.out, stored, o.idx)
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrCorrupt, err)
	}
	o.out = out
	o.idx++
	o.skip = seal.GapBefore(o.idx, o.unit)
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
