package osd

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/braidfs/braid/internal/wire"
)

// The pack's record format, version 1 (pack.go says what the pack is).
// A segment file DIR/pack/SEQ-SALT.log (SEQ: 16 hex digits, increasing;
// SALT: 16 hex digits drawn when the segment was made) is a sequence of
// records, each starting at a multiple of recAlign:
//
//	header  48 bytes (little-endian)
//	  0  4  magic    "BPK1"
//	  4  1  kind     1 image, 2 delete, 3 label, 4 synced
//	  5  1  format   1
//	  6  2  reserved (0)
//	  8  8  ino      the object: component comp of file ino
//	  16 4  comp
//	  20 4  bodyLen  bytes of body
//	  24 8  killed   delete: the newest segment holding a record of the
//	                 incarnation it ends; else 0
//	  32 8  birth    the object's incarnation: drawn when it entered the
//	                 pack, kept by its images, labels and delete
//	  40 4  bodyCRC  CRC32C of the body
//	  44 4  crc      CRC32C of the segment's salt (8 bytes) and bytes 0..43
//	body    bodyLen bytes, then zeros to a multiple of recAlign
//	trailer a copy of the header, so a record whose header is damaged
//	        still names its object (found from the next good record)
//
// The salt keeps bytes that look like a record but are not one of this
// segment's (object data that holds a record, a copy of another segment)
// from checking. An image body is an object's whole state, superseding
// the earlier images of its incarnation: layout version u64, size u32
// (at most packMaxBytes), one CRC32C per 4 KiB block of the data (as the
// file store's sum file: 0 over an all-zero block is a hole), then size
// bytes of data. A label body is the incarnation's label (label.go). A
// delete has no body: the incarnation is gone from the pack (deleted, or
// moved to its own files, the file store's format). A synced record's
// body is a segment and an offset (u64, u64): everything before it was
// fsynced when it was written (telling a write a power cut tore from a
// record that rotted after it was durable). Records are never changed in
// place, only copied forward by compaction and their segment removed.
const (
	packMagic       = 0x314b5042 // "BPK1"
	packFormat      = 1
	recHeaderBytes  = 48
	recTrailerBytes = recHeaderBytes
	recAlign        = 8
	imageFixedBytes = 12 // version, size
	syncedBodyBytes = 16
)

// recKind is what a record says of its object.
type recKind uint8

const (
	recImage  recKind = 1
	recDelete recKind = 2
	recLabel  recKind = 3
	recSynced recKind = 4
)

// recHeader is a record's header as decoded.
type recHeader struct {
	kind    recKind
	key     ObjKey
	bodyLen uint32
	killed  uint64
	birth   uint64
	bodyCRC uint32
}

// headerCRC is the checksum of header bytes b[:44] under salt.
func headerCRC(salt uint64, b []byte) uint32 {
	var s [8]byte
	binary.LittleEndian.PutUint64(s[:], salt)
	return crc32.Update(wire.CRC(s[:]), castagnoli, b[:44])
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recBytes is the length of a record with a body of n bytes.
func recBytes(n int) int64 {
	return recHeaderBytes + alignUp(int64(n), recAlign) + recTrailerBytes
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

func (h recHeader) put(salt uint64, b []byte) {
	binary.LittleEndian.PutUint32(b[0:], packMagic)
	b[4] = byte(h.kind)
	b[5] = packFormat
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.key.Ino)
	binary.LittleEndian.PutUint32(b[16:], h.key.Comp)
	binary.LittleEndian.PutUint32(b[20:], h.bodyLen)
	binary.LittleEndian.PutUint64(b[24:], h.killed)
	binary.LittleEndian.PutUint64(b[32:], h.birth)
	binary.LittleEndian.PutUint32(b[40:], h.bodyCRC)
	binary.LittleEndian.PutUint32(b[44:], headerCRC(salt, b))
}

// decodeHeader reads a header of a segment salted salt, or says why it
// is not one.
func decodeHeader(salt uint64, b []byte) (recHeader, error) {
	if len(b) < recHeaderBytes {
		return recHeader{}, fmt.Errorf("short header")
	}
	if binary.LittleEndian.Uint32(b[0:]) != packMagic {
		return recHeader{}, fmt.Errorf("no record magic")
	}
	if binary.LittleEndian.Uint32(b[44:]) != headerCRC(salt, b) {
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
		birth:   binary.LittleEndian.Uint64(b[32:]),
		bodyCRC: binary.LittleEndian.Uint32(b[40:]),
	}
	switch {
	case h.kind == recImage && (h.bodyLen < imageFixedBytes || h.bodyLen > maxImageBodyBytes):
		return recHeader{}, fmt.Errorf("image body of %d bytes", h.bodyLen)
	case h.kind == recLabel && h.bodyLen > maxLabelBytes:
		return recHeader{}, fmt.Errorf("label of %d bytes", h.bodyLen)
	case h.kind == recDelete && h.bodyLen != 0:
		return recHeader{}, fmt.Errorf("delete with a body")
	case h.kind == recSynced && h.bodyLen != syncedBodyBytes:
		return recHeader{}, fmt.Errorf("synced mark of %d bytes", h.bodyLen)
	case h.kind != recImage && h.kind != recLabel && h.kind != recDelete && h.kind != recSynced:
		return recHeader{}, fmt.Errorf("record kind %d", h.kind)
	}
	return h, nil
}

// maxImageBodyBytes bounds an image: its fixed fields, a checksum per
// block and the data of the largest packed object.
const maxImageBodyBytes = imageFixedBytes + 4*(packMaxBytes/blockBytes) + packMaxBytes

// encodeRecord lays out record h (its body length and checksum filled
// in) with body, for a segment salted salt.
func encodeRecord(salt uint64, h recHeader, body []byte) []byte {
	b := make([]byte, recBytes(len(body)))
	h.bodyLen, h.bodyCRC = uint32(len(body)), wire.CRC(body)
	h.put(salt, b)
	copy(b[recHeaderBytes:], body)
	copy(b[len(b)-recTrailerBytes:], b[:recHeaderBytes])
	return b
}

// resalt is raw record rec (checked under another segment's salt) as it
// is written into a segment salted salt: compaction's copy.
func resalt(salt uint64, rec []byte) []byte {
	out := slices.Clone(rec)
	binary.LittleEndian.PutUint32(out[44:], headerCRC(salt, out))
	copy(out[len(out)-recTrailerBytes:], out[:recHeaderBytes])
	return out
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
func scanSegment(salt uint64, b []byte) (recs []scannedRecord, end int64) {
	for at := int64(0); at+recHeaderBytes <= int64(len(b)); {
		if r, n, ok := recordAt(salt, b, at); ok {
			recs = append(recs, r)
			at += n
			end = at
			continue
		}
		from := at + recAlign
		if h, err := decodeHeader(salt, b[at:]); err == nil {
			// A header that checks over a body that does not: a torn or
			// damaged record, whose data is not searched for records.
			from = at + recBytes(int(h.bodyLen))
		}
		next := nextRecord(salt, b, from)
		last := next < 0
		if last {
			next = alignUp(int64(len(b)), recAlign) // a damaged last record may still end the file
		}
		if t := next - recTrailerBytes; t >= at && t+recTrailerBytes <= int64(len(b)) {
			if h, err := decodeHeader(salt, b[t:]); err == nil {
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
func recordAt(salt uint64, b []byte, off int64) (scannedRecord, int64, bool) {
	h, err := decodeHeader(salt, b[off:])
	if err != nil {
		return scannedRecord{}, 0, false
	}
	n := recBytes(int(h.bodyLen))
	if off+n > int64(len(b)) || string(b[off+n-recTrailerBytes:off+n]) != string(b[off:off+recHeaderBytes]) {
		return scannedRecord{}, 0, false
	}
	body := b[off+recHeaderBytes : off+recHeaderBytes+int64(h.bodyLen)]
	if wire.CRC(body) != h.bodyCRC {
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
func nextRecord(salt uint64, b []byte, from int64) int64 {
	for at := alignUp(from, recAlign); at+recHeaderBytes <= int64(len(b)); at += recAlign {
		if binary.LittleEndian.Uint32(b[at:]) != packMagic {
			continue
		}
		if _, _, ok := recordAt(salt, b, at); ok {
			return at
		}
	}
	return -1
}
