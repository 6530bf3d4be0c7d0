package mds

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// A recovery lists at most maxRecoverProblems problems, and says when
// there were more, so its answer fits a frame.
func TestRecoverProblemsBounded(t *testing.T) {
	var out mdsproto.RecoverResp
	longPath := strings.Repeat("/d", 2000) // a label's path can be 4 KB
	for i := range 3 * maxRecoverProblems {
		addProblem(&out, fmt.Sprint("problem ", i, " at ", longPath))
	}
	if len(out.Problems) != maxRecoverProblems+1 || out.Problems[maxRecoverProblems] != "more problems not listed" {
		t.Fatalf("%d problems, last %q", len(out.Problems), out.Problems[len(out.Problems)-1])
	}
	if b, err := mdsproto.Marshal(out); err != nil || len(b) > wire.MaxMetaBytes {
		t.Fatalf("the answer takes %d bytes (%v), past a frame's %d", len(b), err, wire.MaxMetaBytes)
	}
}

// An inode written by an older release with more extended attributes
// than a network body may carry (format 1 had no count bound) still
// reads, is rewritten as format 2, and reads again: records decode with
// the store's limits, not the network's.
func TestRecordsKeepManyAttributes(t *testing.T) {
	in := inodeRec{Format: recFormat, Inode: mdsproto.Inode{Ino: 9, Type: mdsproto.TypeFile}, Xattrs: map[string][]byte{}}
	for i := range 10_000 {
		in.Xattrs[fmt.Sprint("user.", i)] = []byte{1}
	}
	old, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var got inodeRec
	if err := decodeRecord(old, &got); err != nil || len(got.Xattrs) != 10_000 {
		t.Fatalf("format 1: %d attributes, %v", len(got.Xattrs), err)
	}
	b, err := encodeRecord(&got)
	if err != nil {
		t.Fatal(err)
	}
	var again inodeRec
	if err := decodeRecord(b, &again); err != nil || len(again.Xattrs) != 10_000 {
		t.Fatalf("rewritten as format 2: %d attributes, %v", len(again.Xattrs), err)
	}
}
