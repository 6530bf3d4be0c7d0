package mds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
	"github.com/fxamacker/cbor/v2"
)

func TestRestartLosesNothing(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	if err := cl.Mkdir(ctx, "/keep/deep", true); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetLayout(ctx, "/keep", "ec:3+2,unit=64KiB"); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("acknowledged "), 100_000)
	f, err := cl.Create(ctx, "/keep/deep/file", braid.CreateOptions{SizeHint: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Rename(ctx, "/keep/deep/file", "/keep/renamed"); err != nil {
		t.Fatal(err)
	}
	c.RestartMDS()
	fi, err := cl.Stat(ctx, "/keep/renamed")
	if err != nil || fi.Size != int64(len(data)) || fi.Layout.Spec != "ec:3+2,unit=64KiB,visit=8" {
		t.Fatalf("after restart: %+v %v", fi, err)
	}
	// OSDs re-register with the restarted MDS; then the data reads back.
	var up int
	testcluster.Eventually(t, 20*time.Second, func() bool {
		st, err := cl.Status(ctx)
		up = st.UpOSDs()
		return err == nil && up == 6
	}, func() string { return fmt.Sprintf("OSDs did not rejoin the restarted MDS: %d up", up) })
	r, err := cl.Open(ctx, "/keep/renamed")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("data after MDS restart: %v", err)
	}
	if _, err := cl.Stat(ctx, "/keep/deep/file"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("old name after restart: %v", err)
	}
}

// FuzzHandler sends arbitrary ops and bodies to a live MDS; it must answer
// each (or drop the connection) and keep serving the namespace.
func FuzzHandler(f *testing.F) {
	c := testcluster.Start(f, testcluster.Options{OSDs: 3})
	for _, op := range []uint16{mdsproto.OpLookup, mdsproto.OpMkdir, mdsproto.OpCreate, mdsproto.OpOpen, mdsproto.OpCommit,
		mdsproto.OpReaddir, mdsproto.OpRemove, mdsproto.OpRename, mdsproto.OpSetLayout, mdsproto.OpGetLayout,
		mdsproto.OpStatus, mdsproto.OpHeartbeat} {
		f.Add(op, mustBody(`{"path":"/a/b","from":"/a","to":"/a/b/c","spec":"ec:2+1","layout":"mirror:2","size_hint":10,"ino":2,"size":-5,"dirty":[99]}`))
	}
	f.Add(mdsproto.OpCreate, mustBody(`{"path":"/x","layout":"ec:1+1,unit=16MiB"}`))
	f.Add(mdsproto.OpDirClaim, mustBody(`{"session":5,"epoch":1,"dir":1,"claim":7}`))
	f.Add(mdsproto.OpDirClaim, mustBody(`{"session":5,"dir":1,"claim":7,"extend":true}`))
	f.Add(mdsproto.OpDirFlush, mustBody(`{"once_session":5,"once_seq":1,"session":5,"dir":1,"claim":2,"ops":[{"name":"x","ino":99999,"mode":420},{"remove":true,"name":"y"},{"name":"a/b"}],"release":true}`))
	f.Add(mdsproto.OpRemove, mustBody(`{"once_session":5,"once_seq":1,"once_floor":18446744073709551615,"path":"/a"}`))
	f.Add(mdsproto.OpMkdir, mustBody(`{"once_session":5,"once_seq":18446744073709551615,"once_floor":2,"path":"/a"}`))
	f.Add(mdsproto.OpMkdir, mustBody(`{"path":"`+string(bytes.Repeat([]byte("a/"), 3000))+`","parents":true}`))
	f.Add(mdsproto.OpMkdir, []byte(`{"path":"/json","parents":true}`)) // format 1: refused, nothing else
	f.Add(uint16(9999), []byte{0xf6})                                  // CBOR null
	for _, op := range []uint16{mdsproto.OpExtentLock, mdsproto.OpExtentRelease, mdsproto.OpExtentReclaim, mdsproto.OpLockWait} {
		f.Add(op, mustBody(`{"ino":1,"handle":7,"session":9,"lo":-1,"hi":4611686018427387905,"end":-3,"seq":18446744073709551615,"wait_ns":9223372036854775807,"spans":[[5,2],[0,1]]}`))
		f.Add(op, mustBody(`{"ino":2,"handle":7,"session":9,"lo":0,"hi":1,"wait_ns":1000000}`))
	}
	f.Add(mdsproto.OpCacheWait, mustBody(`{"session":3,"epoch":0,"acked":18446744073709551615,"wait_ns":-1}`))
	f.Add(mdsproto.OpCacheLookup, mustBody(`{"dir":1,"name":"a/..","session":3,"epoch":4294967297}`))
	f.Add(mdsproto.OpCacheLookup, mustBody(`{"dir":18446744073709551615,"name":""}`))
	ctx := context.Background()
	conn, err := wire.Dial(ctx, c.MDS.Addr())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, op uint16, body []byte) {
		if conn.Err() != nil {
			if conn, err = wire.Dial(ctx, c.MDS.Addr()); err != nil {
				t.Fatalf("MDS unreachable: %v", err)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, _, _ = conn.Call(cctx, op, body, nil, nil)
		b, _ := mdsproto.Marshal(mdsproto.PathReq{Path: "/"})
		check, err := wire.Dial(cctx, c.MDS.Addr())
		if err != nil {
			t.Fatalf("MDS down after op %d: %v", op, err)
		}
		defer check.Close()
		if _, _, err := check.Call(cctx, mdsproto.OpLookup, b, nil, nil); err != nil {
			t.Fatalf("root unreadable after op %d %q: %v", op, body, err)
		}
	})
}

// rawCreate starts a 3-OSD cluster and creates /f with spec over a raw
// MDS connection, as a hostile client would.
func rawCreate(t *testing.T, spec string) (*testcluster.Cluster, *wire.Client, mdsproto.OpenResp) {
	t.Helper()
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	conn, err := wire.Dial(ctx, c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	body, _ := mdsproto.Marshal(mdsproto.CreateReq{Path: "/f", Layout: spec, SizeHint: -1})
	meta, _, err := conn.Call(ctx, mdsproto.OpCreate, body, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var open mdsproto.OpenResp
	if err := mdsproto.Unmarshal(meta, &open); err != nil {
		t.Fatal(err)
	}
	return c, conn, open
}

// TestCommitRejectsOversizedDirtyList: a client cannot make the MDS walk
// a dirty-component list longer than the file's layout.
func TestCommitRejectsOversizedDirtyList(t *testing.T) {
	ctx := context.Background()
	_, conn, open := rawCreate(t, "ec:2+1")
	commit := mdsproto.CommitReq{Ino: open.Inode.Ino, Size: 1, LayoutVersion: open.Inode.Layout.Version, Dirty: make([]uint32, 100_000)}
	body, _ := mdsproto.Marshal(commit)
	if _, _, err := conn.Call(ctx, mdsproto.OpCommit, body, nil, nil); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("commit with 100000 dirty entries: %v, want ErrInvalid", err)
	}
	commit.Dirty = []uint32{1}
	body, _ = mdsproto.Marshal(commit)
	if _, _, err := conn.Call(ctx, mdsproto.OpCommit, body, nil, nil); err != nil {
		t.Fatalf("valid commit: %v", err)
	}
}

// TestCommitBounds: a commit cannot record a size past the largest file
// the layout holds (2^63-1 once showed as a negative byte count in
// status), nor extents that are negative, past an object's limit, or for
// another number of parity groups; a valid one records its extents
// within what the size can use.
func TestCommitBounds(t *testing.T) {
	ctx := context.Background()
	c, conn, open := rawCreate(t, "ec:2+1,unit=64KiB")
	commit := func(size int64, extents ...int64) (mdsproto.Inode, error) {
		b, _ := mdsproto.Marshal(mdsproto.CommitReq{Ino: open.Inode.Ino, Size: size, LayoutVersion: open.Inode.Layout.Version, Extents: extents})
		meta, _, err := conn.Call(ctx, mdsproto.OpCommit, b, nil, nil)
		var in mdsproto.Inode
		if err == nil {
			err = mdsproto.Unmarshal(meta, &in)
		}
		return in, err
	}
	if _, err := commit(1<<63 - 1); !errors.Is(err, wire.ErrTooBig) {
		t.Fatalf("commit of size 2^63-1: %v, want ErrTooBig", err)
	}
	for _, ext := range [][]int64{{-1}, {1 << 60}, {1, 2}} {
		if _, err := commit(100, ext...); !errors.Is(err, wire.ErrInvalid) {
			t.Fatalf("commit with extents %v: %v, want ErrInvalid", ext, err)
		}
	}
	in, err := commit(200<<10, 1<<20)
	if err != nil || len(in.Extents) != 1 || in.Extents[0] != 128<<10 {
		t.Fatalf("extents after a commit of 200 KiB claiming 1 MiB written: %v (%v), want [128 KiB]", in.Extents, err)
	}
	st, err := c.Dial().Status(ctx)
	if err != nil || st.LogicalBytes != 200<<10 {
		t.Fatalf("status after commits: %d logical bytes (%v)", st.LogicalBytes, err)
	}
}

// An intent commit sent again (its connection broke after the first copy
// ran: the reply was lost) answers "committed", not "not found": the
// client would otherwise abort a write the MDS has committed.
func TestIntentCommitSentAgainAnswersCommitted(t *testing.T) {
	ctx := context.Background()
	_, conn, open := rawCreate(t, "ec:2+1")
	call := func(op uint16, req any) error {
		b, _ := mdsproto.Marshal(req)
		_, _, err := conn.Call(ctx, op, b, nil, nil)
		return err
	}
	ireq := mdsproto.IntentReq{Ino: open.Inode.Ino, Txid: 77, Version: open.Inode.Layout.Version, Comps: []uint32{0, 1, 2}}
	if err := call(mdsproto.OpIntentBegin, ireq); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := call(mdsproto.OpIntentCommit, mdsproto.IntentReq{Ino: ireq.Ino, Txid: ireq.Txid}); err != nil {
			t.Fatalf("commit %d: %v", i+1, err)
		}
	}
	if err := call(mdsproto.OpIntentCommit, mdsproto.IntentReq{Ino: ireq.Ino, Txid: 78}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("commit of an intent never begun: %v, want ErrNotFound", err)
	}
}

// A release's uncommitted extents count only for a file that never had a
// name, released by the handle holding its writer's lease: the extents
// of a named file, even one unlinked while open (readers still vouch for
// its data against them), are never raised by them.
func TestReleaseCannotRaiseANamedFilesExtents(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	conn, err := wire.Dial(ctx, c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(op uint16, req, resp any) error {
		b, _ := mdsproto.Marshal(req)
		meta, _, err := conn.Call(ctx, op, b, nil, nil)
		if err == nil && resp != nil {
			err = mdsproto.Unmarshal(meta, resp)
		}
		return err
	}
	var open mdsproto.OpenResp
	if err := call(mdsproto.OpCreate, mdsproto.CreateReq{Path: "/f", Layout: "ec:2+1", SizeHint: -1, Handle: 1}, &open); err != nil {
		t.Fatal(err)
	}
	ino := open.Inode.Ino
	if err := call(mdsproto.OpRenew, mdsproto.RenewReq{Ino: ino, Handle: 2}, nil); err != nil {
		t.Fatal(err)
	}
	for _, remove := range []bool{false, true} {
		if remove {
			if err := call(mdsproto.OpRemove, mdsproto.PathReq{Path: "/f"}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, handle := range []uint64{3, 2} { // holding no lease; a writer's
			if err := call(mdsproto.OpRenew, mdsproto.RenewReq{Ino: ino, Handle: handle, Release: true, Uncommitted: []int64{1 << 40}}, nil); err != nil {
				t.Fatalf("release by handle %d: %v", handle, err)
			}
		}
		var in mdsproto.Inode
		if err := call(mdsproto.OpCommit, mdsproto.CommitReq{Ino: ino, Size: 0, LayoutVersion: open.Inode.Layout.Version, Handle: 1}, &in); err != nil {
			t.Fatal(err)
		}
		for _, e := range in.Extents {
			if e != 0 {
				t.Fatalf("releases raised /f's extents to %v (removed while open: %v)", in.Extents, remove)
			}
		}
		if err := call(mdsproto.OpRenew, mdsproto.RenewReq{Ino: ino, Handle: 2}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// Extent lock requests that are malformed or hostile get a clear error,
// and a long poll asking to wait for ever waits at most half a lease.
func TestExtentLockRequestsRefused(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	ctx := context.Background()
	conn, err := wire.Dial(ctx, c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func(op uint16, body string) error {
		_, _, err := conn.Call(ctx, op, mustBody(body), nil, nil)
		return err
	}
	for _, tc := range []struct {
		op   uint16
		body string
		want error
	}{
		{mdsproto.OpExtentLock, `{"ino":1,"handle":0,"session":9,"lo":0,"hi":1}`, wire.ErrInvalid},
		{mdsproto.OpExtentLock, `{"ino":1,"handle":7,"session":9,"lo":5,"hi":2}`, wire.ErrInvalid},
		{mdsproto.OpExtentLock, `{"ino":1,"handle":7,"session":9,"lo":-1,"hi":2}`, wire.ErrInvalid},
		{mdsproto.OpExtentLock, `{"ino":1,"handle":7,"session":9,"lo":0,"hi":4611686018427387905}`, wire.ErrInvalid},
		{mdsproto.OpExtentLock, `{"ino":1,"handle":7,"session":9,"lo":0,"hi":1}`, wire.ErrIsDir}, // the root
		{mdsproto.OpExtentLock, `{"ino":999999,"handle":7,"session":9,"lo":0,"hi":1}`, wire.ErrNotFound},
		{mdsproto.OpExtentRelease, `{"ino":1,"handle":7,"session":9,"lo":0,"hi":1,"end":-1}`, wire.ErrInvalid},
		{mdsproto.OpExtentReclaim, `{"ino":1,"handle":7,"session":9,"spans":[]}`, wire.ErrInvalid},
		{mdsproto.OpExtentReclaim, `{"ino":1,"handle":7,"session":9,"spans":[[3,3]]}`, wire.ErrInvalid},
		{mdsproto.OpLockWait, `{"session":0}`, wire.ErrInvalid},
	} {
		if err := call(tc.op, tc.body); !errors.Is(err, tc.want) {
			t.Errorf("op %d %s: %v, want %v", tc.op, tc.body, err, tc.want)
		}
	}
	spans := make([][2]int64, 5000)
	for i := range spans {
		spans[i] = [2]int64{int64(2 * i), int64(2*i + 1)}
	}
	b, _ := mdsproto.Marshal(mdsproto.ReclaimReq{Ino: 1, Handle: 7, Session: 9, Spans: spans})
	if _, _, err := conn.Call(ctx, mdsproto.OpExtentReclaim, b, nil, nil); !errors.Is(err, wire.ErrInvalid) {
		t.Errorf("reclaim of 5000 ranges: %v, want ErrInvalid", err)
	}
	// A long poll that asks to wait for ever answers within half a lease
	// (the test cluster's lease is a second); the call would time out
	// otherwise.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, _, err := conn.Call(wctx, mdsproto.OpLockWait, mustBody(`{"session":5,"wait_ns":9223372036854775807}`), nil, nil); err != nil {
		t.Errorf("long poll: %v", err)
	}
}

// mustBody is a request body written as JSON, field for field, so
// hostile requests read as what they are. Integers keep their exact
// value (up to 64 bits, signed or not); strings become byte strings, as
// the codec sends them.
func mustBody(text string) []byte {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		panic(err)
	}
	b, err := mdsproto.Marshal(exactNumbers(v))
	if err != nil {
		panic(err)
	}
	return b
}

// exactNumbers replaces JSON numbers with the integers they are, and
// object keys with field names.
func exactNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u
		}
		panic("not an integer: " + x)
	case []any:
		for i := range x {
			x[i] = exactNumbers(x[i])
		}
	case map[string]any:
		m := make(map[fieldName]any, len(x))
		for k, e := range x {
			m[fieldName(k)] = exactNumbers(e)
		}
		return m
	}
	return v
}

// fieldName is a map key naming a field: text, as the codec writes
// struct fields' names, where any other string is bytes.
type fieldName string

func (n fieldName) MarshalCBOR() ([]byte, error) { return cbor.Marshal(string(n)) }
