package mds

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
)

// loggedEngine records the keys each transaction read and wrote.
type loggedEngine struct {
	kv.Engine
	mu     sync.Mutex
	reads  []string
	writes []string
}

func (e *loggedEngine) Update(ctx context.Context, fn func(kv.Txn) error) error {
	return e.Engine.Update(ctx, func(tx kv.Txn) error { return fn(&loggedTxn{Txn: tx, e: e}) })
}

func (e *loggedEngine) reset() {
	e.mu.Lock()
	e.reads, e.writes = nil, nil
	e.mu.Unlock()
}

type loggedTxn struct {
	kv.Txn
	e *loggedEngine
}

func (t *loggedTxn) log(to *[]string, k []byte) {
	t.e.mu.Lock()
	*to = append(*to, string(k))
	t.e.mu.Unlock()
}

func (t *loggedTxn) Get(k []byte) ([]byte, error) { t.log(&t.e.reads, k); return t.Txn.Get(k) }
func (t *loggedTxn) Put(k, v []byte) error        { t.log(&t.e.writes, k); return t.Txn.Put(k, v) }
func (t *loggedTxn) Delete(k []byte) error        { t.log(&t.e.writes, k); return t.Txn.Delete(k) }

// TestEntryChangesDoNotReadTheDirectorysTimes: creating, renaming and
// removing files in a directory write its times without reading them and
// without writing its inode record, so an optimistic engine (etcd) lets
// such changes in one directory commit side by side. The directory's
// times still move, and listings and stat show them.
func TestEntryChangesDoNotReadTheDirectorysTimes(t *testing.T) {
	ctx := context.Background()
	key := testKey(t)
	pebble, err := kv.OpenPebble(filepath.Join(t.TempDir(), "store"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	eng := &loggedEngine{Engine: pebble}
	clock := time.Unix(1e9, 0)
	var clockMu sync.Mutex
	now := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		clock = clock.Add(time.Millisecond)
		return clock
	}
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key, Engine: eng, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	do := func(op uint16, req any, out any) {
		t.Helper()
		if err := handleOp(t, s, op, req, out); err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
	}
	// Three OSDs that exist only in the cluster map: creating an empty
	// file places it, and touches no OSD.
	for i := range 3 {
		hb := mdsproto.HeartbeatReq{UUID: fmt.Sprintf("osd-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1+i), CapacityBytes: 1 << 40, FreeBytes: 1 << 40, TimeNs: now().UnixNano()}
		hb.Sig = key.Sign("heartbeat", hb.SignedBytes())
		do(mdsproto.OpHeartbeat, hb, nil)
	}
	var d mdsproto.Inode
	do(mdsproto.OpMkdir, mdsproto.MkdirReq{Path: "/d", Mode: 0o755}, &d)
	stat := func() mdsproto.Inode {
		var st mdsproto.StatResp
		do(mdsproto.OpStat, mdsproto.PathReq{Path: "/d"}, &st)
		return st.Inode
	}
	for _, step := range []struct {
		name string
		op   uint16
		req  any
	}{
		{"create", mdsproto.OpCreate, mdsproto.CreateReq{Path: "/d/f", Mode: 0o644}},
		{"symlink", mdsproto.OpSymlink, mdsproto.SymlinkReq{Dir: d.Ino, Name: "l", Target: "f"}},
		{"rename", mdsproto.OpRename, mdsproto.RenameReq{From: "/d/f", To: "/d/g"}},
		{"remove", mdsproto.OpRemove, mdsproto.PathReq{Path: "/d/g"}},
	} {
		before := stat()
		eng.reset()
		do(step.op, step.req, nil)
		eng.mu.Lock()
		readTimes := slices.Contains(eng.reads, string(dirTimesKey(d.Ino)))
		wroteRecord := slices.Contains(eng.writes, string(inodeKey(d.Ino)))
		wroteTimes := slices.Contains(eng.writes, string(dirTimesKey(d.Ino)))
		eng.mu.Unlock()
		if readTimes || wroteRecord || !wroteTimes {
			t.Errorf("%s in /d: read its times %v, wrote its record %v, wrote its times %v; want false, false, true", step.name, readTimes, wroteRecord, wroteTimes)
		}
		if after := stat(); after.MtimeNs <= before.MtimeNs || after.CtimeNs <= before.CtimeNs {
			t.Errorf("%s in /d: times %d/%d, were %d/%d", step.name, after.MtimeNs, after.CtimeNs, before.MtimeNs, before.CtimeNs)
		}
	}
	// A subdirectory changes the link count: the record is stored whole,
	// and a listing of the parent shows the times of the record of times.
	do(mdsproto.OpMkdir, mdsproto.MkdirReq{Path: "/d/sub", Mode: 0o755}, nil)
	do(mdsproto.OpCreate, mdsproto.CreateReq{Path: "/d/sub/x", Mode: 0o644}, nil)
	var sub mdsproto.StatResp
	do(mdsproto.OpStat, mdsproto.PathReq{Path: "/d/sub"}, &sub)
	page, err := s.readdir(ctx, mdsproto.ReaddirReq{Path: "/d"})
	if err != nil {
		t.Fatal(err)
	}
	if d := stat(); d.Nlink != 3 {
		t.Errorf("/d's link count with one subdirectory: %d", d.Nlink)
	}
	found := false
	for _, raw := range page.Entries {
		var e mdsproto.DirEntry
		if err := mdsproto.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		if e.Name == "sub" {
			found = true
			if e.Inode.MtimeNs != sub.Inode.MtimeNs {
				t.Errorf("listing shows sub's mtime %d, stat %d", e.Inode.MtimeNs, sub.Inode.MtimeNs)
			}
		}
	}
	if !found {
		t.Error("sub not listed")
	}
	// rmdir takes the directory's times with it.
	do(mdsproto.OpRemove, mdsproto.PathReq{Path: "/d/sub/x"}, nil)
	do(mdsproto.OpRemove, mdsproto.PathReq{Path: "/d/sub"}, nil)
	var left []byte
	if err := s.kv.View(ctx, func(r kv.Reader) error {
		var err error
		left, err = r.Get(dirTimesKey(sub.Inode.Ino))
		return err
	}); err != nil || left != nil {
		t.Errorf("a removed directory's times record: %q, %v", left, err)
	}
	if d := stat(); d.Nlink != 2 {
		t.Errorf("/d's link count after its subdirectory went: %d", d.Nlink)
	}
}
