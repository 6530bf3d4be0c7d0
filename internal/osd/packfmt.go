package osd

import (
	"encoding/binary"
	"fmt"

	"github.com/braidfs/braid/internal/wire"
)

// The pack's record format, version 1 (pack.go says what the pack is).
// A segment file DIR/pack/SEQ.log (SEQ: 16 hex digits, increasing) is a
// sequence of records, each starting at a multiple of recAlign:
//
//	header  40 bytes (little-endian)
//	  0  4  magic    "BPK1"
//	  4  1  kind     1 image, 2 delete, 3 label
//	  5  1  format   1
//	  6  2  reserved (0)
//	  8  8  ino      the object: component comp of file ino
//	  16 4  comp
//	  20 4  bodyLen  bytes of body
//	  24 8  killed   delete: the segment holding the record it ends; else 0
//	  32 4  bodyCRC  CRC32C of the body
//	  36 4  crc      CRC32C of bytes 0..35
//	body    bodyLen bytes, then zeros to a multiple of recAlign
//	trailer a copy of the header, so a record whose header is damaged
//	        still names its object (found from the next good record)
//
// An image body is an object's whole state, superseding every earlier
// record of it: layout version u64, size u32 (at most packMaxBytes), one
// CRC32C per 4 KiB block of the data (as the file store's sum file: 0
// over an all-zero block is a hole), then size bytes of data. A label
// body is the object's label (label.go), superseding earlier labels of
// the same incarnation. A delete has no body: the object is gone from the
// pack (deleted, or moved to its own files, the file store's format).
// The latest record of an object wins; records are never changed in
// place, only copied forward by compaction and their segment removed.
const (
	packMagic       = 0x314b5042 // "BPK1"
	packFormat      = 1
	recHeaderBytes  = 40
	recTrailerBytes = recHeaderBytes
	recAlign        = 8
	imageFixedBytes = 12 // version, size
)

// recKind is what a record says of its object.
type recKind uint8

const (
	recImage  recKind = 1
	recDelete recKind = 2
	recLabel  recKind = 3
)

// recHeader is a record's header as decoded.
type recHeader struct {
	kind    recKind
	key     ObjKey
	bodyLen uint32
	killed  uint64
	bodyCRC uint32
}

// recBytes is the length of a record with a body of n bytes.
func recBytes(n int) int64 {
	return recHeaderBytes + alignUp(int64(n), recAlign) + recTrailerBytes
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

func (h recHeader) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], packMagic)
	b[4] = byte(h.kind)
	b[5] = packFormat
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.key.Ino)
	binary.LittleEndian.PutUint32(b[16:], h.key.Comp)
	binary.LittleEndian.PutUint32(b[20:], h.bodyLen)
	binary.LittleEndian.PutUint64(b[24:], h.killed)
	binary.LittleEndian.PutUint32(b[32:], h.bodyCRC)
	binary.LittleEndian.PutUint32(b[36:], wire.CRC(b[:36]))
}

// decodeHeader reads a header, or says why it is not one.
func decodeHeader(b []byte) (recHeader, error) {
	if len(b) < recHeaderBytes {
		return recHeader{}, fmt.Errorf("short header")
	}
	if binary.LittleEndian.Uint32(b[0:]) != packMagic {
		return recHeader{}, fmt.Errorf("no record magic")
	}
	if binary.LittleEndian.Uint32(b[36:]) != wire.CRC(b[:36]) {
		return recHeader{}, fmt.Errorf("header checksum mismatch")
	}
	if b[5] != packFormat {
		return recHeader{}, fmt.Errorf("record format %d, want %d", b[5], packFormat)
	}
	h := recHeader{
		kind:    recKind(b[4]),
		key:     ObjKey{Ino: binary.LittleEndian.Uint64(b[8:]), Comp: binary.LittleEndian.Uint32(b[16:])},
		bodyLen: binary.LittleEndian.Uint32(b[20:]),
		killed:  binary.LittleEndian.Uint64(b[24:]),
		bodyCRC: binary.LittleEndian.Uint32(b[32:]),
	}
	switch {
	case h.kind == recImage && (h.bodyLen < imageFixedBytes || h.bodyLen > maxImageBodyBytes):
		return recHeader{}, fmt.Errorf("image body of %d bytes", h.bodyLen)
	case h.kind == recLabel && h.bodyLen > maxLabelBytes:
		return recHeader{}, fmt.Errorf("label of %d bytes", h.bodyLen)
	case h.kind == recDelete && h.bodyLen != 0:
		return recHeader{}, fmt.Errorf("delete with a body")
	case h.kind != recImage && h.kind != recLabel && h.kind != recDelete:
		return recHeader{}, fmt.Errorf("record kind %d", h.kind)
	}
	return h, nil
}

// maxImageBodyBytes bounds an image: its fixed fields, a checksum per
// block and the data of the largest packed object.
const maxImageBodyBytes = imageFixedBytes + 4*(packMaxBytes/blockBytes) + packMaxBytes

// encodeRecord lays out a record of kind for key with body.
func encodeRecord(kind recKind, key ObjKey, killed uint64, body []byte) []byte {
	b := make([]byte, recBytes(len(body)))
	h := recHeader{kind: kind, key: key, bodyLen: uint32(len(body)), killed: killed, bodyCRC: wire.CRC(body)}
	h.put(b)
	copy(b[recHeaderBytes:], body)
	copy(b[len(b)-recTrailerBytes:], b[:recHeaderBytes])
	return b
}

// image is a packed object's state.
type image struct {
	version uint64
	sums    []uint32 // one per block of data
	data    []byte
}

func (im *image) size() int64 { return int64(len(im.data)) }

func (im *image) encode() []byte {
	b := make([]byte, imageFixedBytes+4*len(im.sums)+len(im.data))
	binary.LittleEndian.PutUint64(b[0:], im.version)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(im.data)))
	for i, s := range im.sums {
		binary.LittleEndian.PutUint32(b[imageFixedBytes+4*i:], s)
	}
	copy(b[imageFixedBytes+4*len(im.sums):], im.data)
	return b
}

// decodeImage reads an image body whose CRC was checked.
func decodeImage(b []byte) (*image, error) {
	if len(b) < imageFixedBytes {
		return nil, fmt.Errorf("image body of %d bytes", len(b))
	}
	size := int64(binary.LittleEndian.Uint32(b[8:]))
	blocks := (size + blockBytes - 1) / blockBytes
	if size > packMaxBytes || int64(len(b)) != imageFixedBytes+4*blocks+size {
		return nil, fmt.Errorf("image of %d bytes in a body of %d", size, len(b))
	}
	im := &image{version: binary.LittleEndian.Uint64(b[0:]), sums: make([]uint32, blocks)}
	for i := range im.sums {
		im.sums[i] = binary.LittleEndian.Uint32(b[imageFixedBytes+4*i:])
	}
	im.data = b[imageFixedBytes+4*blocks:]
	return im, nil
}

// imageMeta reads an image's version and size from the start of its body.
func imageMeta(b []byte) (version uint64, size int64) {
	return binary.LittleEndian.Uint64(b[0:]), int64(binary.LittleEndian.Uint32(b[8:]))
}

// scannedRecord is one record found in a segment, with where it starts.
type scannedRecord struct {
	off  int64
	h    recHeader
	body []byte
	// damaged: not a record, but the trailer of one that does not check,
	// naming its object (what was there is lost: the object reads as
	// corrupt until written again).
	damaged bool
}

// scanSegment parses segment bytes b into records. A region that is not
// a record (torn by a power cut, or damaged) is skipped up to the next
// record whose header and body check; where the damaged record left a
// readable trailer, a damaged entry names its object. end is where the
// last good record ends: past it there is nothing (a torn tail, to be
// cut off).
func scanSegment(b []byte) (recs []scannedRecord, end int64) {
	for at := int64(0); at+recHeaderBytes <= int64(len(b)); {
		if r, n, ok := recordAt(b, at); ok {
			recs = append(recs, r)
			at += n
			end = at
			continue
		}
		next := nextRecord(b, at+recAlign)
		last := next < 0
		if last {
			next = alignUp(int64(len(b)), recAlign) // a damaged last record may still end the file
		}
		if t := next - recTrailerBytes; t >= at && t+recTrailerBytes <= int64(len(b)) {
			if h, err := decodeHeader(b[t:]); err == nil {
				recs = append(recs, scannedRecord{off: t, h: h, damaged: true})
			}
		}
		if last {
			break
		}
		at = next
	}
	return recs, end
}

// recordAt decodes the whole record at off, checked: header, body and
// trailer.
func recordAt(b []byte, off int64) (scannedRecord, int64, bool) {
	h, err := decodeHeader(b[off:])
	if err != nil {
		return scannedRecord{}, 0, false
	}
	n := recBytes(int(h.bodyLen))
	if off+n > int64(len(b)) {
		return scannedRecord{}, 0, false
	}
	body := b[off+recHeaderBytes : off+recHeaderBytes+int64(h.bodyLen)]
	if wire.CRC(body) != h.bodyCRC || string(b[off+n-recTrailerBytes:off+n]) != string(b[off:off+recHeaderBytes]) {
		return scannedRecord{}, 0, false
	}
	if h.kind == recImage {
		if _, err := decodeImage(body); err != nil {
			return scannedRecord{}, 0, false
		}
	}
	return scannedRecord{off: off, h: h, body: body}, n, true
}

// nextRecord is the offset of the first whole, checked record at or after
// from, or -1.
func nextRecord(b []byte, from int64) int64 {
	for at := alignUp(from, recAlign); at+recHeaderBytes <= int64(len(b)); at += recAlign {
		if binary.LittleEndian.Uint32(b[at:]) != packMagic {
			continue
		}
		if _, _, ok := recordAt(b, at); ok {
			return at
		}
	}
	return -1
}
