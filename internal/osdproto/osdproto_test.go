package osdproto

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/wire"
)

func TestRoundTrip(t *testing.T) {
	key, _ := capability.NewKey()
	c := key.Issue(5, capability.Read|capability.Write, 2, time.Unix(100, 0))
	for op, r := range map[uint16]Req{
		OpWrite:    {Cap: c, Ino: 5, Comp: 3, Off: 1 << 40, Flags: FlagSync},
		OpRead:     {Cap: c, Ino: 5, Comp: 1, Off: 4096, Len: 1 << 20},
		OpSync:     {Cap: c, Ino: 5, Comps: []uint32{0, 1, 2}},
		OpDelete:   {Cap: c, Ino: 5, Comps: []uint32{4}},
		OpTruncate: {Cap: c, Ino: 5, Comp: 2, Off: 77, Flags: FlagMustExist},
		OpStat:     {Cap: c, Ino: 5, Comp: 2},
		OpStage:    {Cap: c, Ino: 5, Comp: 1, Off: 1 << 20, Txid: 0xfeedface},
		OpApply:    {Cap: c, Ino: 5, Comp: 1, Txid: 7, Flags: FlagMustExist},
		OpStage + 100: {Cap: c, Ino: 5, Comp: 1, Off: 0, Txid: 3,
			Segs: []Seg{{Off: 0, Len: 4096}, {Off: 1 << 20, Len: 1 << 20}, {Off: 3 << 20, Len: 1}}},
		OpStage + 200: {Cap: c, Ino: 5, Comp: 1, Off: 0, Txid: 3,
			Segs: []Seg{{Off: 0, Len: 4096}, {Off: 1 << 20, Len: MaxZeroSegBytes, Zero: true}, {Off: 3 << 40, Len: 1}}},
		OpAbort: {Cap: c, Ino: 5, Comp: 4, Txid: 9},
		OpLabel: {Cap: c, Ino: 5, Comps: []uint32{0, 3}},
		OpScan:  {Cap: c, Cursor: []byte("0a/x"), Len: 100},
		OpLabels: {Cap: c, Labels: []LabelEntry{{Ino: 5, Version: 2, Comps: []uint32{0, 3}, Len: 100},
			{Ino: 9, Version: 1, Comps: []uint32{1}, Len: 7}}},
	} {
		if op == OpStage+100 || op == OpStage+200 {
			op = OpStage
		}
		got, err := Decode(op, r.Encode(op))
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Errorf("op %d: got %+v, %v; want %+v", op, got, err, r)
		}
	}
}

// A Stage's segments must be ascending, not overlapping, inside the
// object size limit, and between 1 and MaxSegs of them; a segment of
// zeros is not empty.
func TestStageSegmentsRejected(t *testing.T) {
	key, _ := capability.NewKey()
	c := key.Issue(5, capability.Write, 1, time.Unix(100, 0))
	for name, segs := range map[string][]Seg{
		"overlapping": {{Off: 0, Len: 4096}, {Off: 4095, Len: 10}},
		"descending":  {{Off: 8192, Len: 10}, {Off: 0, Len: 10}},
		"past limit":  {{Off: MaxObjectBytes - 5, Len: 10}},
		"too many":    make([]Seg, MaxSegs+1),
		"empty zeros": {{Off: 0, Len: 4096}, {Off: 8192, Zero: true}},
	} {
		if name == "too many" {
			for i := range segs {
				segs[i] = Seg{Off: int64(i), Len: 1}
			}
		}
		r := Req{Cap: c, Ino: 5, Comp: 1, Txid: 3, Segs: segs}
		if _, err := Decode(OpStage, r.Encode(OpStage)); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
	meta := (&Req{Cap: c, Ino: 5, Comp: 1, Txid: 3}).Encode(OpStage)
	meta = append(meta, 0, 0, 0, 0) // a list of no segments
	if _, err := Decode(OpStage, meta); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("empty segment list: %v, want ErrBadRequest", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	key, _ := capability.NewKey()
	r := Req{Cap: key.Issue(5, capability.Read, 1, time.Unix(100, 0)), Ino: 5, Comp: 1, Len: 10}
	meta := r.Encode(OpRead)
	for name, tc := range map[string]struct {
		op   uint16
		meta []byte
	}{
		"truncated":       {OpRead, meta[:len(meta)-1]},
		"trailing":        {OpRead, append(append([]byte{}, meta...), 0)},
		"unknown op":      {99, meta},
		"empty":           {OpWrite, nil},
		"negative offset": {OpRead, (&Req{Cap: r.Cap, Off: -1}).Encode(OpRead)},
		"huge offset":     {OpWrite, (&Req{Cap: r.Cap, Off: 1 << 62}).Encode(OpWrite)},
	} {
		if _, err := Decode(tc.op, tc.meta); !errors.Is(err, wire.ErrBadRequest) && !errors.Is(err, wire.ErrUnknownOp) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	key, _ := capability.NewKey()
	c := key.Issue(5, capability.Read, 1, time.Unix(100, 0))
	for op := OpWrite; op <= OpLabels; op++ {
		f.Add(op, (&Req{Cap: c, Ino: 5, Comps: []uint32{1}, Labels: []LabelEntry{{Ino: 5, Version: 1, Comps: []uint32{1}, Len: 9}}}).Encode(op))
	}
	f.Fuzz(func(t *testing.T, op uint16, meta []byte) {
		r, err := Decode(op, meta)
		if err != nil {
			return
		}
		if r.Off < 0 || r.Off > MaxObjectBytes || len(r.Comps) > MaxComps || len(r.Labels) > MaxLabelEntries {
			t.Fatalf("decoder accepted out-of-range request %+v", r)
		}
		comps := 0
		for _, l := range r.Labels {
			if comps += len(l.Comps); l.Len == 0 || l.Len > MaxLabelLen || comps > MaxLabelComps {
				t.Fatalf("decoder accepted out-of-range label entries %+v", r.Labels)
			}
		}
	})
}

// Reply metas round-trip; a reply that names no boot, or is malformed,
// is refused.
func TestReplyMetas(t *testing.T) {
	w := WriteReply{Boot: 7, Created: true}
	if got, err := DecodeWriteReply(w.Encode()); err != nil || got != w {
		t.Fatalf("write reply: %+v %v", got, err)
	}
	for _, bad := range [][]byte{nil, WriteReply{Boot: 0}.Encode(), append(WriteReply{Boot: 1}.Encode()[:8], 2), append(w.Encode(), 0)} {
		if _, err := DecodeWriteReply(bad); err == nil {
			t.Fatalf("write reply %x accepted", bad)
		}
	}
	if boot, err := DecodeBoot(EncodeBoot(9)); err != nil || boot != 9 {
		t.Fatalf("sync reply: %d %v", boot, err)
	}
	for _, bad := range [][]byte{nil, EncodeBoot(0), append(EncodeBoot(9), 1)} {
		if _, err := DecodeBoot(bad); err == nil {
			t.Fatalf("sync reply %x accepted", bad)
		}
	}
	info := ObjectInfo{Len: 5, Version: 2, Boot: 3}
	if got, err := DecodeObjectInfo(info.Encode()); err != nil || got != info {
		t.Fatalf("object info: %+v %v", got, err)
	}
}

// AllZero reads words and then the tail: a byte set anywhere is seen.
func TestAllZero(t *testing.T) {
	for n := 0; n <= 20; n++ {
		p := make([]byte, n)
		if !AllZero(p) {
			t.Fatalf("%d zeros: not all zero", n)
		}
		for i := range p {
			p[i] = 1
			if AllZero(p) {
				t.Fatalf("%d bytes with byte %d set: all zero", n, i)
			}
			p[i] = 0
		}
	}
}
