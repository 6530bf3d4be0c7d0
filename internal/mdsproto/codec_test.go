package mdsproto

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// messages returns a zero value of every message type, to decode into.
func messages() []any {
	return []any{
		&Layout{}, &Inode{}, &Endpoint{}, &HeartbeatReq{}, &HeartbeatResp{}, &PathReq{}, &MkdirReq{},
		&CreateReq{}, &Publish{}, &OpenReq{}, &OpenResp{}, &ExtentReq{}, &ExtentGrant{}, &LockWaitReq{},
		&LockWaitResp{}, &ReclaimReq{}, &Recall{}, &CommitReq{}, &ReaddirReq{}, &DirEntry{}, &ReaddirResp{},
		&RenameReq{}, &SetLayoutReq{}, &GetLayoutResp{}, &OSDStatus{}, &StatusResp{}, &RepairProgress{},
		&PendingDelete{}, &MarkDirtyReq{}, &RepairAssignReq{}, &RepairTask{}, &RepairDoneReq{}, &IntentReq{},
		&RenewReq{}, &RenewResp{}, &ScrubReq{}, &ScrubResp{}, &DrainReq{}, &ObjectLabel{}, &RecoverReq{},
		&RecoverResp{}, &SetattrReq{}, &LinkReq{}, &SymlinkReq{}, &XattrReq{}, &XattrResp{}, &StatfsResp{},
		&CacheWaitReq{}, &CacheWaitResp{}, &Invalidation{}, &CacheLookupReq{}, &CacheLookupResp{}, &CacheSelf{},
		&SelfEntry{}, &SelfKept{}, &SealedLabel{},
	}
}

// A name is bytes: what JSON would have turned into U+FFFD, and the
// characters it escapes, come back exactly.
func TestBodiesKeepNameBytes(t *testing.T) {
	names := []string{"n\xff", "n\xfe", "n\xef\xbf\xbd", "<>&\"'\\", "\x01\x1b\x7f", strings.Repeat("\xc3", 255), ""}
	for _, n := range names {
		in := ReaddirResp{Entries: []DirEntry{{Name: n, Inode: Inode{Ino: 7, Type: TypeSymlink, Target: n + "/t"}}}, More: true}
		b, err := Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out ReaddirResp
		if err := Unmarshal(b, &out); err != nil {
			t.Fatalf("%q: %v", n, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Errorf("%q came back as %q (target %q)", n, out.Entries[0].Name, out.Entries[0].Inode.Target)
		}
	}
	// What JSON does to the same names, which is why bodies are not JSON.
	j, _ := json.Marshal(DirEntry{Name: "n\xff"})
	var back DirEntry
	_ = json.Unmarshal(j, &back)
	if back.Name == "n\xff" {
		t.Errorf("JSON kept a byte that is not UTF-8: the codec's reason is gone")
	}
}

// Hostile bodies get an error, never a panic: duplicate keys, nesting,
// indefinite lengths, tags, truncation.
func TestBodiesRefuseMalformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"truncated":      {0xa1, 0x64, 'p', 'a'},
		"duplicate key":  {0xa2, 0x43, 'i', 'n', 'o', 0x01, 0x43, 'i', 'n', 'o', 0x02},
		"indefinite map": {0xbf, 0xff},
		"tag":            {0xc1, 0x01},
		"deep":           append([]byte(strings.Repeat("\x81", 64)), 0x01),
		"huge length":    {0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"wrong type":     {0xa1, 0x63, 'i', 'n', 'o', 0x61, 'x'},
	} {
		var in Inode
		if err := Unmarshal(b, &in); err == nil {
			t.Errorf("%s: decoded as %+v", name, in)
		}
	}
	var p PathReq
	if err := Unmarshal([]byte(`{"path":"/"}`), &p); err == nil || !strings.Contains(err.Error(), "format 1") {
		t.Errorf("a JSON body from an older peer: %v, want an error naming its format", err)
	}
}

// FuzzBodies: any body decodes into any message without a panic, and
// what decodes encodes to something that decodes to the same.
func FuzzBodies(f *testing.F) {
	for _, m := range messages() {
		b, err := Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	full, _ := Marshal(OpenResp{Inode: Inode{Ino: 1, Type: TypeFile, Layout: &Layout{Spec: "ec:4+2", OSDs: []uint32{1, 2}}},
		Cap: []byte{1, 2}, Endpoints: map[uint32]Endpoint{3: {Addr: "a\xff"}}, Lock: &ExtentGrant{}})
	f.Add(full)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range messages() {
			v := reflect.New(reflect.TypeOf(m).Elem()).Interface()
			if Unmarshal(b, v) != nil {
				continue
			}
			again, err := Marshal(v)
			if err != nil {
				t.Fatalf("%T decoded but does not encode: %v", v, err)
			}
			w := reflect.New(reflect.TypeOf(m).Elem()).Interface()
			if err := Unmarshal(again, w); err != nil {
				t.Fatalf("%T re-encoded does not decode: %v", v, err)
			}
			if !reflect.DeepEqual(v, w) {
				t.Fatalf("%T changed in a round trip: %+v != %+v", v, v, w)
			}
		}
	})
}
