package mds

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// A record keeps a name's bytes, format 1 (JSON) records still read,
// and a record with a flipped bit or an unknown format is an error,
// never a zero inode.
func TestRecords(t *testing.T) {
	in := inodeRec{Format: recFormat, Inode: mdsproto.Inode{Ino: 9, Type: mdsproto.TypeSymlink, Target: "t\xff"}, Parent: 1, Name: "n\xfe"}
	b, err := encodeRecord(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out inodeRec
	if err := decodeRecord(b, &out); err != nil || out.Name != in.Name || out.Target != in.Target || out.Ino != 9 {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	legacy, _ := json.Marshal(inodeRec{Format: recFormat, Inode: mdsproto.Inode{Ino: 4, Type: mdsproto.TypeDir}, Name: "old"})
	var old inodeRec
	if err := decodeRecord(legacy, &old); err != nil || old.Ino != 4 || old.Name != "old" {
		t.Fatalf("format 1 record: %+v, %v", old, err)
	}
	var n uint64
	if err := decodeRecord([]byte("7"), &n); err != nil || n != 7 {
		t.Fatalf("format 1 number record: %d, %v", n, err)
	}
	for i := range b {
		for _, bit := range []byte{1, 0x80} {
			bad := append([]byte(nil), b...)
			bad[i] ^= bit
			var v inodeRec
			if err := decodeRecord(bad, &v); !errors.Is(err, wire.ErrInternal) {
				t.Fatalf("byte %d bit %#x flipped: %+v, %v", i, bit, v, err)
			}
		}
	}
	for _, bad := range [][]byte{nil, {recordFormat}, {9, 0, 0, 0, 0, 0xa0}} {
		if err := decodeRecord(bad, &out); !errors.Is(err, wire.ErrInternal) {
			t.Errorf("%x: %v", bad, err)
		}
	}
}

// entryBytesBound bounds what an entry takes in a reply, for the largest
// entries a directory can hold.
func TestEntryBytesBound(t *testing.T) {
	name := string(make([]byte, maxNameBytes))
	for _, e := range []mdsproto.DirEntry{
		{Name: "a", Inode: mdsproto.Inode{Ino: 1, Type: mdsproto.TypeFile}},
		{Name: name, Inode: mdsproto.Inode{Ino: 1<<64 - 1, Type: mdsproto.TypeSymlink, Mode: 1<<32 - 1, Size: -1 << 63,
			Nlink: 1<<32 - 1, MtimeNs: -1 << 63, CtimeNs: -1 << 63, AtimeNs: -1 << 63, Uid: 1<<32 - 1, Gid: 1<<32 - 1,
			Target: string(make([]byte, maxSymlinkBytes)), DirLayout: "ec:16+4,unit=16MiB,visit=64", SizeGen: 1<<64 - 1,
			Dirty: make([]uint32, 24), Extents: []int64{-1 << 63, -1 << 63},
			Layout: &mdsproto.Layout{Spec: "ec:16+4,unit=16MiB,visit=64", Groups: 1 << 30, OSDs: []uint32{1<<32 - 1, 1<<32 - 1}, Version: 1<<64 - 1}}},
	} {
		b, err := mdsproto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if bound := entryBytesBound(e); len(b) > bound {
			t.Errorf("entry of %d bytes, bound %d", len(b), bound)
		}
	}
}
