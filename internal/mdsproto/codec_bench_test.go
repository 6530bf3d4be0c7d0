package mdsproto

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/braidfs/braid/internal/wire"
)

// The codec was chosen by these: a page of 256 directory entries (the
// heaviest reply of every listing) and an open's reply, in JSON (format
// 1), in CBOR (format 2), and through a hand codec in the style of the
// OSD's (osdproto), written here for the page only, as the lower bound.
// `go test -run XXX -bench Codec ./internal/mdsproto` (numbers in
// docs/DECISIONS.md, "MDS bodies: CBOR").

func benchPage() ReaddirResp {
	var p ReaddirResp
	for i := range 256 {
		p.Entries = append(p.Entries, DirEntry{Name: fmt.Sprintf("checkpoint.%06d.h5", i), Inode: Inode{
			Ino: uint64(1000 + i), Type: TypeFile, Mode: 0o644, Size: 1 << 30, Nlink: 1, MtimeNs: 1.7e18, CtimeNs: 1.7e18,
			Uid: 1000, Gid: 1000, Extents: []int64{1 << 28},
			Layout: &Layout{Spec: "ec:4+2", Groups: 1, OSDs: []uint32{1, 2, 3, 4, 5, 6}, Version: 3}}})
	}
	return p
}

func benchOpen() OpenResp {
	eps := map[uint32]Endpoint{}
	for i := range uint32(6) {
		eps[i+1] = Endpoint{Addr: fmt.Sprintf("10.0.0.%d:7000", i+1), Up: true}
	}
	return OpenResp{Inode: benchPage().Entries[0].Inode, Cap: make([]byte, 96), Endpoints: eps, LeaseNs: 1e10}
}

// handPage encodes a page as osdproto encodes its headers: fixed fields
// in order, no names.
func handPage(p ReaddirResp) []byte {
	e := wire.Enc{B: make([]byte, 0, 64*len(p.Entries))}
	e.U32(uint32(len(p.Entries)))
	for _, d := range p.Entries {
		in := d.Inode
		e.Bytes([]byte(d.Name))
		e.U64(in.Ino)
		e.Bytes([]byte(in.Type))
		e.U32(in.Mode)
		e.I64(in.Size)
		e.U32(in.Nlink)
		e.I64(in.MtimeNs)
		e.I64(in.CtimeNs)
		e.U32(in.Uid)
		e.U32(in.Gid)
		e.U32(uint32(len(in.Extents)))
		for _, x := range in.Extents {
			e.I64(x)
		}
		e.Bytes([]byte(in.Layout.Spec))
		e.U32(uint32(in.Layout.Groups))
		e.U32(uint32(len(in.Layout.OSDs)))
		for _, o := range in.Layout.OSDs {
			e.U32(o)
		}
		e.U64(in.Layout.Version)
	}
	return e.B
}

func unhandPage(b []byte) (ReaddirResp, error) {
	d := wire.NewDec(b)
	var p ReaddirResp
	n := d.U32()
	for range min(n, 1<<16) {
		var in Inode
		name := string(d.Bytes())
		in.Ino = d.U64()
		in.Type = string(d.Bytes())
		in.Mode, in.Size, in.Nlink = d.U32(), d.I64(), d.U32()
		in.MtimeNs, in.CtimeNs, in.Uid, in.Gid = d.I64(), d.I64(), d.U32(), d.U32()
		for range min(d.U32(), 64) {
			in.Extents = append(in.Extents, d.I64())
		}
		l := &Layout{Spec: string(d.Bytes()), Groups: int(d.U32())}
		for range min(d.U32(), 64) {
			l.OSDs = append(l.OSDs, d.U32())
		}
		l.Version = d.U64()
		in.Layout = l
		p.Entries = append(p.Entries, DirEntry{Name: name, Inode: in})
	}
	return p, d.Err()
}

func BenchmarkCodec(b *testing.B) {
	type codec struct {
		name string
		enc  func(any) ([]byte, error)
		dec  func([]byte, any) error
	}
	for _, c := range []codec{{"json", json.Marshal, json.Unmarshal}, {"cbor", Marshal, Unmarshal}} {
		for _, m := range []struct {
			name string
			v    any
			into func() any
		}{
			{"page256", benchPage(), func() any { return &ReaddirResp{} }},
			{"open", benchOpen(), func() any { return &OpenResp{} }},
		} {
			body, _ := c.enc(m.v)
			b.Run(c.name+"/"+m.name+"/encode", func(b *testing.B) {
				for b.Loop() {
					if _, err := c.enc(m.v); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(body)), "body-bytes")
			})
			b.Run(c.name+"/"+m.name+"/decode", func(b *testing.B) {
				for b.Loop() {
					if err := c.dec(body, m.into()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
	p := benchPage()
	body := handPage(p)
	b.Run("hand/page256/encode", func(b *testing.B) {
		for b.Loop() {
			handPage(p)
		}
		b.ReportMetric(float64(len(body)), "body-bytes")
	})
	b.Run("hand/page256/decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := unhandPage(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}
