// Package osdproto defines the OSD's operations on the wire: op codes and
// the binary meta sections of each request and response, carried in
// internal/wire frames. Every request names a file (ino) and component(s)
// and carries the capability the MDS issued for that file.
//
// Meta layouts, version 7 (version 2 added boots to Write, Sync, Read and
// Stat replies, version 3 the must-exist flag to Truncate and Apply,
// version 4 the optional segment list to Stage, version 5 segments of
// zeros, version 6 DataMap, version 7 SyncAll;
// wire.Enc encoding: little-endian integers, u16-length-prefixed byte
// strings; cap is capability.Encode, 57 bytes):
//
//	Write    cap, ino u64, comp u32, off i64, flags u8 (1 sync, 2 must exist)  data = bytes, resp meta = boot u64, created u8
//	Read     cap, ino u64, comp u32, off i64, len u32                  resp data = bytes, resp meta = objLen i64, version u64, boot u64
//	Sync     cap, ino u64, n u32, comp u32 × n                         resp meta = boot u64
//	Truncate cap, ino u64, comp u32, size i64, flags u8 (2 must exist) resp meta = boot u64, created u8
//	Delete   cap, ino u64, n u32, comp u32 × n
//	Stat     cap, ino u64, comp u32                                    resp meta = objLen i64, version u64, boot u64
//	Stage    cap, ino u64, comp u32, off i64, txid u64                 data = bytes (kept aside, durable)
//	         [n u32, (off i64, len u32) × n]  optional: data is n segments, one after another, each
//	                                  for the object at its off (ascending, not overlapping);
//	                                  without it, one segment at off (a writer batching several
//	                                  stripes into one staged write sends one stage per component);
//	                                  len's top bit set: len bytes of zeros, not in the data (a
//	                                  punched hole, deallocated on apply)
//	Apply    cap, ino u64, comp u32, txid u64, flags u8 (2 must exist) staged bytes written into the object; resp meta = boot u64, created u8
//	Abort    cap, ino u64, comp u32, txid u64                          staged bytes dropped
//	Label    cap, ino u64, n u32, comp u32 × n                         data = label (an ObjectLabel in the MDS's body codec) for each
//	Scan     cap (ino 0), ino u64 = 0, cursor bytes, limit u32         resp meta = next cursor, data = JSON []ScanEntry
//	DataMap  cap, ino u64, comp u32, off i64, unit u32, units u32      resp meta = objLen i64, version u64, boot u64 (as Stat),
//	                                  data = bitmap: bit i (byte i/8, bit i%8) set if [off+i*unit, +unit) holds data
//	                                  (up to the object's end, at most units <= MaxDataMapUnits bits; unit whole 4 KiB blocks,
//	                                  off a multiple of it; a missing object maps nothing). Version 6.
//	SyncAll  cap, ino u64                                              resp meta = boot u64: every write the OSD answered before
//	                                  it took this request is durable (a write capability for any file: a client makes the
//	                                  unsynced writes of every file it closed under the async policy durable with one
//	                                  request per OSD). Version 7.
//	Labels   cap (ino 0), ino u64 = 0, n u32, (ino u64, version u64, m u32, comp u32 × m, len u32) × n
//	                                  data = the n labels one after another (their lens summing to the data's
//	                                  length): each written on its file's comps as Label does (the MDS labels the files
//	                                  changed in the last moments with one request per OSD). Version 7.
//
// boot names the OSD process's incarnation (random per start; keeping it
// across a clean shutdown that synced everything is not built yet). A write without the sync flag
// is durable only once a Sync answers from the same boot: a Sync that
// answers from another boot means the OSD restarted in between and may
// have lost the writes (a power cut), so the writer must treat them as
// missed.
//
// Must exist (FlagMustExist): the writer knows the object holds data, so
// an OSD that does not have it refuses with ErrLost instead of creating
// it (with holes below the write that would read as zeros). Unlike the
// reply's created flag, the refusal survives a lost reply: a request
// sent again is refused again.
//
// Sync under a newer layout version than the object's records that version
// (a repair fences old writers this way).
//
// A read past the end of an object returns zeros: stripes are computed over
// zero-padded units, so holes decode like data.
package osdproto

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/wire"
)

// Op codes.
const (
	OpWrite    uint16 = 1
	OpRead     uint16 = 2
	OpSync     uint16 = 3
	OpTruncate uint16 = 4
	OpDelete   uint16 = 5
	OpStat     uint16 = 6
	OpStage    uint16 = 7
	OpApply    uint16 = 8
	OpAbort    uint16 = 9
	OpLabel    uint16 = 10
	OpScan     uint16 = 11
	OpDataMap  uint16 = 12
	OpSyncAll  uint16 = 13
	OpLabels   uint16 = 14
)

// MaxLabelEntries bounds the files one Labels request labels, and
// MaxLabelComps the components of all of them.
const (
	MaxLabelEntries = 1024
	MaxLabelComps   = 16384
	MaxLabelLen     = 4096 // a label's bytes, at most (the OSD's own bound may be lower)
)

// LabelEntry is one file's label in a Labels request: written on comps
// of file Ino under layout Version; Len bytes of the request's data,
// after the entries before it.
type LabelEntry struct {
	Ino     uint64
	Version uint64
	Comps   []uint32
	Len     uint32
}

// MaxScan bounds the objects one Scan lists.
const MaxScan = 2048

// Request flags.
const (
	// FlagSync asks the OSD to make a write durable before answering.
	FlagSync = 1
	// FlagMustExist asks the OSD to refuse (ErrLost) a Write, Truncate
	// or Apply to an object it does not have, rather than create it.
	FlagMustExist = 2
)

// UnitBroken reports whether an OSD's answer to an Apply (or Abort) says
// the unit cannot be applied there however often it is sent: a block it
// merges with fails its checksum, its disk fails or is full, the object
// is lost, the stage was aborted (ErrInvalid), or the OSD never had it
// (ErrNotFound: an applied or aborted stage leaves a tombstone, so this
// is not "done"). An OSD that is unreachable, restarting or busy is not
// broken. Writers and the MDS's resolver both give such a unit up to a
// rebuild.
func UnitBroken(err error) bool {
	return errors.Is(err, wire.ErrCorrupt) || errors.Is(err, wire.ErrLost) || errors.Is(err, wire.ErrInternal) ||
		errors.Is(err, wire.ErrNoSpace) || errors.Is(err, wire.ErrBadRequest) || errors.Is(err, wire.ErrInvalid) ||
		errors.Is(err, wire.ErrNotFound)
}

// MaxSegs bounds the segments of one Stage.
const MaxSegs = 4096

// Seg is one segment of a Stage: Len bytes for the object at Off, taken
// from the data, or, if Zero, Len bytes of zeros that take no data (a
// punched hole: the OSD deallocates them when it applies the stage).
type Seg struct {
	Off  int64
	Len  uint32
	Zero bool
}

// segZeroBit marks a segment of zeros in its encoded length.
const segZeroBit = 1 << 31

// MaxZeroSegBytes bounds one segment of zeros (the encoded length keeps
// its top bit for the zero flag).
const MaxZeroSegBytes = segZeroBit - 1

// EncodedLen is the segment's length as the wire (and an OSD's stage
// file) carries it: the top bit set for a segment of zeros.
func (g Seg) EncodedLen() uint32 {
	if g.Zero {
		return g.Len | segZeroBit
	}
	return g.Len
}

// SegAt is the segment at off whose encoded length is n (EncodedLen).
func SegAt(off int64, n uint32) Seg {
	return Seg{Off: off, Len: n &^ segZeroBit, Zero: n&segZeroBit != 0}
}

// AllZero reports whether p holds only zeros: a block whose checksum
// entry is 0 and whose bytes are all zero is a hole, and a staged piece
// of zero blocks is sent as a segment of zeros.
func AllZero(p []byte) bool {
	for len(p) >= 8 {
		if binary.LittleEndian.Uint64(p) != 0 {
			return false
		}
		p = p[8:]
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// DataLen is how many bytes of a Stage's data the segment takes.
func (g Seg) DataLen() int64 {
	if g.Zero {
		return 0
	}
	return int64(g.Len)
}

// MaxComps bounds the component list of one request.
const MaxComps = 4096

// MaxObjectBytes bounds offsets and sizes within one object (256 TiB), so
// offset arithmetic can never overflow.
const MaxObjectBytes = layout.MaxObjectBytes

// Req is the decoded meta of any OSD request; fields unused by an op are 0.
type Req struct {
	Cap    capability.Cap
	Ino    uint64
	Comp   uint32
	Comps  []uint32
	Off    int64 // Write, Read; Truncate's new size
	Len    uint32
	Flags  uint8
	Txid   uint64       // Stage, Apply, Abort
	Segs   []Seg        // Stage: the data's segments, if more than one
	Cursor []byte       // Scan: where the previous page ended
	Units  uint32       // DataMap: the most units to map (<= MaxDataMapUnits)
	Labels []LabelEntry // Labels: the files labelled, their labels in the data one after another
}

// MaxDataMapUnits bounds the units one DataMap maps (a 1 MiB bitmap).
const MaxDataMapUnits = 8 << 20

func (r *Req) head(e *wire.Enc) {
	e.Bytes(r.Cap.Encode())
	e.U64(r.Ino)
}

// Encode renders the meta section of op.
func (r *Req) Encode(op uint16) []byte {
	e := &wire.Enc{B: make([]byte, 0, 96)}
	r.head(e)
	switch op {
	case OpWrite:
		e.U32(r.Comp)
		e.I64(r.Off)
		e.U8(r.Flags)
	case OpRead:
		e.U32(r.Comp)
		e.I64(r.Off)
		e.U32(r.Len)
	case OpSync, OpDelete, OpLabel:
		e.U32(uint32(len(r.Comps)))
		for _, c := range r.Comps {
			e.U32(c)
		}
	case OpTruncate:
		e.U32(r.Comp)
		e.I64(r.Off)
		e.U8(r.Flags)
	case OpStat:
		e.U32(r.Comp)
	case OpDataMap:
		e.U32(r.Comp)
		e.I64(r.Off)
		e.U32(r.Len)
		e.U32(r.Units)
	case OpStage:
		e.U32(r.Comp)
		e.I64(r.Off)
		e.U64(r.Txid)
		if len(r.Segs) > 0 {
			e.U32(uint32(len(r.Segs)))
			for _, g := range r.Segs {
				e.I64(g.Off)
				e.U32(g.EncodedLen())
			}
		}
	case OpApply:
		e.U32(r.Comp)
		e.U64(r.Txid)
		e.U8(r.Flags)
	case OpAbort:
		e.U32(r.Comp)
		e.U64(r.Txid)
	case OpScan:
		e.Bytes(r.Cursor)
		e.U32(r.Len)
	case OpLabels:
		e.U32(uint32(len(r.Labels)))
		for _, l := range r.Labels {
			e.U64(l.Ino)
			e.U64(l.Version)
			e.U32(uint32(len(l.Comps)))
			for _, c := range l.Comps {
				e.U32(c)
			}
			e.U32(l.Len)
		}
	}
	return e.B
}

// decodeLabels parses a Labels request's entries.
func decodeLabels(d *wire.Dec) ([]LabelEntry, error) {
	n := d.U32()
	if n == 0 || n > MaxLabelEntries {
		return nil, wire.Errorf(wire.ErrBadRequest, "%d label entries (1..%d)", n, MaxLabelEntries)
	}
	out := make([]LabelEntry, 0, n)
	comps := 0
	for i := uint32(0); i < n && !d.Short(); i++ {
		l := LabelEntry{Ino: d.U64(), Version: d.U64()}
		nc := d.U32()
		if comps += int(nc); nc == 0 || comps > MaxLabelComps {
			return nil, wire.Errorf(wire.ErrBadRequest, "label entries name %d components (1 each at least, %d in all)", comps, MaxLabelComps)
		}
		for j := uint32(0); j < nc && !d.Short(); j++ {
			l.Comps = append(l.Comps, d.U32())
		}
		if l.Len = d.U32(); l.Len == 0 || l.Len > MaxLabelLen {
			return nil, wire.Errorf(wire.ErrBadRequest, "label of %d bytes (1..%d)", l.Len, MaxLabelLen)
		}
		out = append(out, l)
	}
	return out, nil
}

// Decode parses the meta section of op, rejecting anything malformed.
func Decode(op uint16, meta []byte) (Req, error) {
	d := wire.NewDec(meta)
	var r Req
	capBytes := d.Bytes()
	r.Ino = d.U64()
	switch op {
	case OpWrite:
		r.Comp, r.Off, r.Flags = d.U32(), d.I64(), d.U8()
	case OpRead:
		r.Comp, r.Off, r.Len = d.U32(), d.I64(), d.U32()
	case OpSync, OpDelete, OpLabel:
		n := d.U32()
		if n > MaxComps {
			return Req{}, wire.Errorf(wire.ErrBadRequest, "%d components exceeds %d", n, MaxComps)
		}
		for i := uint32(0); i < n && !d.Short(); i++ {
			r.Comps = append(r.Comps, d.U32())
		}
	case OpTruncate:
		r.Comp, r.Off, r.Flags = d.U32(), d.I64(), d.U8()
	case OpStat:
		r.Comp = d.U32()
	case OpDataMap:
		r.Comp, r.Off, r.Len, r.Units = d.U32(), d.I64(), d.U32(), d.U32()
		if r.Units == 0 || r.Units > MaxDataMapUnits {
			return Req{}, wire.Errorf(wire.ErrBadRequest, "data map of %d units (1..%d)", r.Units, MaxDataMapUnits)
		}
	case OpStage:
		r.Comp, r.Off, r.Txid = d.U32(), d.I64(), d.U64()
		if d.More() {
			segs, err := decodeSegs(d)
			if err != nil {
				return Req{}, err
			}
			r.Segs = segs
		}
	case OpApply:
		r.Comp, r.Txid, r.Flags = d.U32(), d.U64(), d.U8()
	case OpAbort:
		r.Comp, r.Txid = d.U32(), d.U64()
	case OpSyncAll:
	case OpLabels:
		labels, err := decodeLabels(d)
		if err != nil {
			return Req{}, err
		}
		r.Labels = labels
	case OpScan:
		r.Cursor, r.Len = d.Bytes(), d.U32()
		if r.Len > MaxScan {
			return Req{}, wire.Errorf(wire.ErrBadRequest, "scan of %d objects exceeds %d", r.Len, MaxScan)
		}
	default:
		return Req{}, wire.Errorf(wire.ErrUnknownOp, "osd op %d", op)
	}
	if err := d.Err(); err != nil {
		return Req{}, err
	}
	c, err := capability.Decode(capBytes)
	if err != nil {
		return Req{}, fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
	}
	r.Cap = c
	if r.Off < 0 || r.Off > MaxObjectBytes {
		return Req{}, wire.Errorf(wire.ErrBadRequest, "offset %d outside 0..%d", r.Off, int64(MaxObjectBytes))
	}
	return r, nil
}

// decodeSegs reads a Stage's segment list: 1..MaxSegs segments inside
// the object size limit, ascending and not overlapping.
func decodeSegs(d *wire.Dec) ([]Seg, error) {
	n := d.U32()
	if n == 0 || n > MaxSegs {
		return nil, wire.Errorf(wire.ErrBadRequest, "stage of %d segments (1..%d)", n, MaxSegs)
	}
	segs := make([]Seg, 0, min(n, 64))
	end := int64(0)
	for i := uint32(0); i < n && !d.Short(); i++ {
		g := SegAt(d.I64(), d.U32())
		if g.Zero && g.Len == 0 {
			return nil, wire.Errorf(wire.ErrBadRequest, "stage segment %d: no zeros", i)
		}
		if g.Off < end || g.Off > MaxObjectBytes-int64(g.Len) {
			return nil, wire.Errorf(wire.ErrBadRequest, "stage segment %d at %d+%d overlaps the one before or passes the object size limit", i, g.Off, g.Len)
		}
		end = g.Off + int64(g.Len)
		segs = append(segs, g)
	}
	return segs, nil
}

// SegsOf is a Stage's segments: its list, or one segment of n bytes at
// its offset.
func (r *Req) SegsOf(n int) []Seg {
	if len(r.Segs) > 0 {
		return r.Segs
	}
	return []Seg{{Off: r.Off, Len: uint32(n)}}
}

// ObjectInfo is the meta of Read and Stat responses.
type ObjectInfo struct {
	Len     int64
	Version uint64
	Boot    uint64 // the answering OSD process (see boot above)
}

func (o ObjectInfo) Encode() []byte {
	var e wire.Enc
	e.I64(o.Len)
	e.U64(o.Version)
	e.U64(o.Boot)
	return e.B
}

func DecodeObjectInfo(b []byte) (ObjectInfo, error) {
	d := wire.NewDec(b)
	o := ObjectInfo{Len: d.I64(), Version: d.U64(), Boot: d.U64()}
	return o, d.Err()
}

// WriteReply is the meta of a Write, Truncate or Apply response: the answering boot, and
// whether the write created the object (it did not exist before). A
// writer that expected the object to hold data learns so that it was
// lost: the new object holds holes below the write.
type WriteReply struct {
	Boot    uint64
	Created bool
}

func (w WriteReply) Encode() []byte {
	e := &wire.Enc{B: make([]byte, 0, 9)}
	e.U64(w.Boot)
	var created uint8
	if w.Created {
		created = 1
	}
	e.U8(created)
	return e.B
}

// DecodeWriteReply reads the meta of a Write response; one that names no
// boot cannot vouch for durability and is an error.
func DecodeWriteReply(b []byte) (WriteReply, error) {
	d := wire.NewDec(b)
	w := WriteReply{Boot: d.U64()}
	created := d.U8()
	if err := d.Err(); err != nil {
		return WriteReply{}, err
	}
	if w.Boot == 0 || created > 1 {
		return WriteReply{}, wire.Errorf(wire.ErrBadRequest, "write reply: boot %d, created %d", w.Boot, created)
	}
	w.Created = created == 1
	return w, nil
}

// EncodeBoot is the meta of a Sync response.
func EncodeBoot(boot uint64) []byte {
	e := &wire.Enc{B: make([]byte, 0, 8)}
	e.U64(boot)
	return e.B
}

// DecodeBoot reads the meta of a Sync response. A reply that
// names no boot cannot vouch for durability and is an error.
func DecodeBoot(b []byte) (uint64, error) {
	d := wire.NewDec(b)
	boot := d.U64()
	if err := d.Err(); err != nil {
		return 0, err
	}
	if boot == 0 {
		return 0, wire.Errorf(wire.ErrBadRequest, "reply names no OSD boot")
	}
	return boot, nil
}

// ScanEntry is one object in a Scan response.
type ScanEntry struct {
	Ino     uint64 `json:"ino"`
	Comp    uint32 `json:"comp"`
	Version uint64 `json:"version"`
	Len     int64  `json:"len"`
	Label   []byte `json:"label,omitempty"` // as the MDS wrote it (mds.decodeLabel)
}
