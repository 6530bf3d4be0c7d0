package wire

import (
	"encoding/binary"
	"fmt"
)

// Enc appends little-endian fields to a meta section.
type Enc struct{ B []byte }

func (e *Enc) U8(v uint8)   { e.B = append(e.B, v) }
func (e *Enc) U32(v uint32) { e.B = binary.LittleEndian.AppendUint32(e.B, v) }
func (e *Enc) U64(v uint64) { e.B = binary.LittleEndian.AppendUint64(e.B, v) }
func (e *Enc) I64(v int64)  { e.U64(uint64(v)) }

// Bytes appends a byte string with a 16-bit length prefix.
func (e *Enc) Bytes(b []byte) {
	e.B = binary.LittleEndian.AppendUint16(e.B, uint16(len(b)))
	e.B = append(e.B, b...)
}

// Dec reads fields written by Enc. The first short read sets Err and every
// later read returns zero, so decoders check Err once at the end.
type Dec struct {
	b   []byte
	err error
}

// NewDec decodes b.
func NewDec(b []byte) *Dec { return &Dec{b: b} }

func (d *Dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("%w: meta truncated", ErrBadRequest)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *Dec) U8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *Dec) U32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *Dec) U64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *Dec) I64() int64 { return int64(d.U64()) }

// Bytes reads a length-prefixed byte string (aliasing the input).
func (d *Dec) Bytes() []byte {
	b := d.take(2)
	if b == nil {
		return nil
	}
	return d.take(int(binary.LittleEndian.Uint16(b)))
}

// More reports whether bytes are left to read (for optional trailing
// fields a later version added).
func (d *Dec) More() bool { return d.err == nil && len(d.b) > 0 }

// Short reports whether a read ran past the end of the input.
func (d *Dec) Short() bool { return d.err != nil }

// Err reports a short read, or trailing bytes the decoder did not expect.
func (d *Dec) Err() error {
	if d.err == nil && len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing meta bytes", ErrBadRequest, len(d.b))
	}
	return d.err
}
