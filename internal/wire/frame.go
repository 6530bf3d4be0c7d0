package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

const (
	magic         = 0x31445242 // "BRD1"
	version       = 1
	headerBytes   = 36
	KindRequest   = 1
	KindResponse  = 2
	MaxMetaBytes  = 1 << 20  // largest meta section accepted
	MaxDataBytes  = 16 << 20 // largest data section accepted
	reservedField = 0
)

// Castagnoli is the CRC32C table, hardware accelerated on amd64 and arm64.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC returns the CRC32C of b.
func CRC(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ErrFrame is wrapped by every malformed-frame error.
var ErrFrame = errors.New("malformed frame")

// Header is a decoded frame header.
type Header struct {
	Kind    uint8
	Op      uint16
	ID      uint64
	MetaLen uint32
	DataLen uint32
	Status  Code
	DataCRC uint32
}

// put encodes h and meta's checksum into b (len >= headerBytes).
func (h Header) put(b []byte, meta []byte) {
	binary.LittleEndian.PutUint32(b[0:], magic)
	b[4] = version
	b[5] = h.Kind
	binary.LittleEndian.PutUint16(b[6:], h.Op)
	binary.LittleEndian.PutUint64(b[8:], h.ID)
	binary.LittleEndian.PutUint32(b[16:], h.MetaLen)
	binary.LittleEndian.PutUint32(b[20:], h.DataLen)
	binary.LittleEndian.PutUint16(b[24:], uint16(h.Status))
	binary.LittleEndian.PutUint16(b[26:], reservedField)
	binary.LittleEndian.PutUint32(b[28:], h.DataCRC)
	c := crc32.Update(crc32.Checksum(b[:32], castagnoli), castagnoli, meta)
	binary.LittleEndian.PutUint32(b[32:], c)
}

// parseHeader decodes and bounds-checks a frame header. The header checksum
// is verified later, once the meta section has been read.
func parseHeader(b []byte) (Header, error) {
	if len(b) < headerBytes {
		return Header{}, fmt.Errorf("%w: short header", ErrFrame)
	}
	if binary.LittleEndian.Uint32(b[0:]) != magic {
		return Header{}, fmt.Errorf("%w: bad magic", ErrFrame)
	}
	if b[4] != version {
		return Header{}, fmt.Errorf("%w: unsupported version %d", ErrFrame, b[4])
	}
	h := Header{
		Kind:    b[5],
		Op:      binary.LittleEndian.Uint16(b[6:]),
		ID:      binary.LittleEndian.Uint64(b[8:]),
		MetaLen: binary.LittleEndian.Uint32(b[16:]),
		DataLen: binary.LittleEndian.Uint32(b[20:]),
		Status:  Code(binary.LittleEndian.Uint16(b[24:])),
		DataCRC: binary.LittleEndian.Uint32(b[28:]),
	}
	switch {
	case h.Kind != KindRequest && h.Kind != KindResponse:
		return Header{}, fmt.Errorf("%w: bad kind %d", ErrFrame, h.Kind)
	case h.MetaLen > MaxMetaBytes:
		return Header{}, fmt.Errorf("%w: meta %d bytes exceeds %d", ErrFrame, h.MetaLen, MaxMetaBytes)
	case h.DataLen > MaxDataBytes:
		return Header{}, fmt.Errorf("%w: data %d bytes exceeds %d", ErrFrame, h.DataLen, MaxDataBytes)
	case binary.LittleEndian.Uint16(b[26:]) != reservedField:
		return Header{}, fmt.Errorf("%w: reserved field set", ErrFrame)
	}
	return h, nil
}

func checkHeaderCRC(hdr, meta []byte) error {
	want := binary.LittleEndian.Uint32(hdr[32:])
	if crc32.Update(crc32.Checksum(hdr[:32], castagnoli), castagnoli, meta) != want {
		return fmt.Errorf("%w: header checksum mismatch", ErrFrame)
	}
	return nil
}

// Frame is one decoded frame with its sections.
type Frame struct {
	Header
	Meta []byte
	Data []byte
}

// ReadFrame reads one whole frame from r, allocating its sections. It is
// the reference decoder (used by tests and the fuzzer); connections use
// the zero-copy path in Client and Server, which shares parseHeader.
func ReadFrame(r io.Reader) (Frame, error) {
	var hb [headerBytes]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Frame{}, err
	}
	h, err := parseHeader(hb[:])
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Header: h, Meta: make([]byte, h.MetaLen), Data: make([]byte, h.DataLen)}
	if _, err := io.ReadFull(r, f.Meta); err != nil {
		return Frame{}, fmt.Errorf("%w: truncated meta: %v", ErrFrame, err)
	}
	if err := checkHeaderCRC(hb[:], f.Meta); err != nil {
		return Frame{}, err
	}
	if _, err := io.ReadFull(r, f.Data); err != nil {
		return Frame{}, fmt.Errorf("%w: truncated data: %v", ErrFrame, err)
	}
	if CRC(f.Data) != h.DataCRC {
		return Frame{}, fmt.Errorf("%w: data checksum mismatch", ErrFrame)
	}
	return f, nil
}

// AppendFrame encodes a whole frame onto dst (tests and small messages).
func AppendFrame(dst []byte, h Header, meta, data []byte) []byte {
	h.MetaLen, h.DataLen, h.DataCRC = uint32(len(meta)), uint32(len(data)), CRC(data)
	var hb [headerBytes]byte
	h.put(hb[:], meta)
	dst = append(dst, hb[:]...)
	dst = append(dst, meta...)
	return append(dst, data...)
}

// FrameLen is the length of the whole frame that b starts with: 0 while b
// is shorter than a header, -1 if its header is malformed. The simulation's
// network uses it to tell requests apart in a byte stream.
func FrameLen(b []byte) int {
	if len(b) < headerBytes {
		return 0
	}
	h, err := parseHeader(b)
	if err != nil {
		return -1
	}
	return headerBytes + int(h.MetaLen) + int(h.DataLen)
}
