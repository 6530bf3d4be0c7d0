package mds

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/braidfs/braid/internal/mdsproto"
)

// The requester's grant rides on any answer: appended to its CBOR map,
// it leaves the answer as it was and decodes as sent, whatever the map's
// size (the header's count changes form at 24 entries).
func TestAppendSelfKeepsTheAnswer(t *testing.T) {
	self := &mdsproto.CacheSelf{Epoch: 1<<32 | 3, Seq: 9, Inodes: []mdsproto.Inode{{Ino: 5, Type: mdsproto.TypeDir, Mode: 0o755}},
		Entries: []mdsproto.SelfEntry{{Dir: 5, Name: "n\xff", Ino: 6}}, Kept: []mdsproto.SelfKept{{Ino: 5, Seq: 8}}}
	answers := []any{
		&struct{}{},
		&mdsproto.Inode{Ino: 7, Type: mdsproto.TypeFile, Mode: 0o644, Size: 3, Nlink: 1},
		&mdsproto.OpenResp{Inode: mdsproto.Inode{Ino: 7}, Cap: []byte{1, 2}, LeaseNs: 4},
		&mdsproto.XattrResp{Names: []string{"a", "b"}},
	}
	for _, a := range answers {
		b, err := mdsproto.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		got := appendSelf(b, self)
		back := reflect.New(reflect.TypeOf(a).Elem()).Interface()
		if err := mdsproto.Unmarshal(got, back); err != nil || !reflect.DeepEqual(back, a) {
			t.Fatalf("%T with the grant: %+v %v", a, back, err)
		}
		var s struct {
			Self *mdsproto.CacheSelf `json:"cache_self"`
		}
		if err := mdsproto.Unmarshal(got, &s); err != nil || !reflect.DeepEqual(s.Self, self) {
			t.Fatalf("%T: grant came back as %+v %v", a, s.Self, err)
		}
	}
	// Answers of 22, 23 and 24 fields: the count moves into a byte of
	// its own at 24.
	for _, n := range []int{22, 23, 24} {
		var fields []reflect.StructField
		for i := range n {
			fields = append(fields, reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: reflect.TypeOf(0), Tag: reflect.StructTag(fmt.Sprintf(`json:"f%d"`, i))})
		}
		typ := reflect.StructOf(fields)
		v := reflect.New(typ)
		for i := range n {
			v.Elem().Field(i).SetInt(int64(i + 1))
		}
		b, _ := mdsproto.Marshal(v.Interface())
		got := appendSelf(b, self)
		back := reflect.New(typ)
		if err := mdsproto.Unmarshal(got, back.Interface()); err != nil || !reflect.DeepEqual(back.Elem().Interface(), v.Elem().Interface()) {
			t.Fatalf("answer of %d fields: %+v %v", n, back.Elem().Interface(), err)
		}
		var s struct {
			Self *mdsproto.CacheSelf `json:"cache_self"`
		}
		if err := mdsproto.Unmarshal(got, &s); err != nil || !reflect.DeepEqual(s.Self, self) {
			t.Fatalf("answer of %d fields: grant %+v %v", n, s.Self, err)
		}
	}
	if got := appendSelf([]byte{0x80}, self); len(got) != 1 {
		t.Fatal("an answer that is not a map was changed")
	}
}
