package braid_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/testcluster"
)

// served sums the requests of op the cluster's OSDs took.
func served(c *testcluster.Cluster, op uint16) (n uint64) {
	for _, s := range c.OSDs {
		n += s.Served(op)
	}
	return n
}

// asyncClient is a client whose files follow the async policy, whose
// syncer waits for SyncData (the interval is longer than any test).
func asyncClient(c *testcluster.Cluster) *braid.Client {
	return c.DialWith(func(o *braid.Options) {
		o.Sync = mdsproto.SyncAsync
		o.AsyncSyncInterval = time.Hour
	})
}

// Under the async policy a close sends no sync: another client reads the
// file at once, and one SyncAll per OSD then makes every file closed
// meanwhile durable (the cluster policy pays a synced write per file and
// OSD instead).
func TestAsyncClosesShareOneSyncPerOSD(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true})
	cl, other := asyncClient(c), c.Dial()
	syncs, syncAlls := served(c, osdproto.OpSync), served(c, osdproto.OpSyncAll)
	want := map[string][]byte{}
	for i := range 20 {
		p := fmt.Sprintf("/f%02d", i)
		want[p] = bytes.Repeat([]byte{byte(i)}, 4096+i)
		put(t, cl, p, "", want[p])
	}
	for p, data := range want {
		mustRead(t, other, p, "another client's read after an async close", data)
	}
	if n := served(c, osdproto.OpSync) - syncs; n != 0 {
		t.Errorf("async closes sent %d syncs, want none", n)
	}
	if n := served(c, osdproto.OpSyncAll) - syncAlls; n != 0 {
		t.Errorf("%d SyncAlls before SyncData, want none (the interval is an hour)", n)
	}
	cl.SyncData(t.Context())
	if n := served(c, osdproto.OpSyncAll) - syncAlls; n != 6 {
		t.Errorf("SyncData sent %d SyncAlls, want 6 (one per OSD)", n)
	}
	cl.SyncData(t.Context())
	if n := served(c, osdproto.OpSyncAll) - syncAlls; n != 6 {
		t.Errorf("a second SyncData with nothing waiting sent %d more SyncAlls", n-6)
	}
}

// braid.sync on a directory is inherited by the files made in it, as a
// layout is; the value is checked, and only the owner sets it.
func TestSyncPolicyIsInheritedFromTheDirectory(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true})
	cl := c.Dial()
	ctx := t.Context()
	for _, d := range []string{"/async", "/async/deeper", "/plain"} {
		if err := cl.Mkdir(ctx, d, false); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := cl.Stat(ctx, "/async")
	if err != nil {
		t.Fatal(err)
	}
	set := func(ino uint64, v string) error {
		_, err := cl.Xattr(ctx, braid.XattrRequest{Ino: ino, Op: mdsproto.XattrSet, Name: mdsproto.SyncXattr, Value: []byte(v)})
		return err
	}
	if err := set(dir.Ino, "sometimes"); !errors.Is(err, braid.ErrInvalid) {
		t.Fatalf("braid.sync set to a policy that does not exist: %v, want ErrInvalid", err)
	}
	if err := set(dir.Ino, mdsproto.SyncAsync); err != nil {
		t.Fatal(err)
	}
	stranger := c.DialWith(func(o *braid.Options) { o.Caller = &braid.Caller{Uid: 1234, Gid: 1234} })
	if _, err := stranger.Xattr(ctx, braid.XattrRequest{Ino: dir.Ino, Op: mdsproto.XattrSet, Name: mdsproto.SyncXattr,
		Value: []byte(mdsproto.SyncCluster)}); !errors.Is(err, braid.ErrPerm) {
		t.Fatalf("another user set the directory's policy: %v, want ErrPerm", err)
	}
	syncAllsAfter := func(p string) uint64 {
		before := served(c, osdproto.OpSyncAll)
		put(t, cl, p, "", bytes.Repeat([]byte("x"), 5000))
		cl.SyncData(ctx)
		return served(c, osdproto.OpSyncAll) - before
	}
	if n := syncAllsAfter("/async/deeper/f"); n == 0 {
		t.Errorf("a file under a directory set async was closed as under cluster (no SyncAll followed)")
	}
	if n := syncAllsAfter("/plain/f"); n != 0 {
		t.Errorf("a file under no policy was closed as under async (%d SyncAlls followed)", n)
	}
	f, err := cl.Stat(ctx, "/async/deeper/f")
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.Xattr(ctx, braid.XattrRequest{Ino: f.Ino, Op: mdsproto.XattrGet, Name: mdsproto.SyncXattr})
	if err != nil || string(r.Value) != mdsproto.SyncAsync {
		t.Fatalf("the file's own braid.sync: %q (%v), want %q", r.Value, err, mdsproto.SyncAsync)
	}
}

// An OSD that restarts between an async close and the SyncAll may have
// lost what it took: its component is marked dirty, never trusted, and
// the file reads right from the others.
func TestAsyncWritesAnOSDMayHaveLostAreMarked(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true})
	cl := asyncClient(c)
	ctx := t.Context()
	data := bytes.Repeat([]byte("async"), 1000)
	f, err := cl.Create(ctx, "/f", braid.CreateOptions{Mode: 0o644, SizeHint: -1, Layout: "mirror:3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := cl.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	first := st.Layout.Components[0].OSD
	idx := slices.IndexFunc(c.OSDs, func(s *osd.Server) bool { return s.ID() == first })
	c.RestartOSD(idx)
	c.WaitUp(6)
	cl.SyncData(ctx)
	in, err := cl.GetAttr(ctx, st.Ino)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(in.Dirty, 0) {
		t.Fatalf("component 0, on the OSD that restarted before the SyncAll, is not marked dirty: %v", in.Dirty)
	}
	mustRead(t, c.Dial(), "/f", "the file after its OSD restarted", data)
}

// A client that dies under the async policy loses nothing it closed or
// fsynced: the OSDs took every closed file's bytes and make them durable
// on their own (each heartbeat), and another client reads them all;
// fsync made its file durable before it returned (no SyncAll was
// pending for it afterwards).
func TestAsyncClientDeathLosesNothingClosed(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true})
	cl := asyncClient(c)
	ctx := t.Context()
	want := map[string][]byte{}
	for i := range 10 {
		p := fmt.Sprintf("/closed%d", i)
		want[p] = bytes.Repeat([]byte{byte('a' + i)}, 3000+i)
		put(t, cl, p, "", want[p])
	}
	synced := bytes.Repeat([]byte("fsync"), 2000)
	f, err := cl.Create(ctx, "/synced", braid.CreateOptions{Mode: 0o644, SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(synced, 0); err != nil {
		t.Fatal(err)
	}
	syncAlls := served(c, osdproto.OpSyncAll)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := served(c, osdproto.OpSyncAll) - syncAlls; n == 0 {
		t.Errorf("fsync left the closed files' writes waiting for the interval (no SyncAll)")
	}
	want["/synced"] = synced
	braid.CrashClient(cl)
	other := c.Dial()
	for p, data := range want {
		mustRead(t, other, p, "after the writer died", data)
	}
}
