package braid_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/testcluster"
)

// A small file written and closed costs each OSD of its layout one
// request (the unit write, synced: no sync request follows) and the MDS
// one commit that also ends the writer's lease (no release follows).
// Before, close sent every OSD a write and then a sync, and the MDS a
// commit and then a release.
func TestSmallFileCloseRoundTrips(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true})
	cl := c.Dial()
	served := func(op uint16) (n uint64) {
		for _, s := range c.OSDs {
			n += s.Served(op)
		}
		return n
	}
	data := bytes.Repeat([]byte("small"), 800)
	f, err := cl.Create(t.Context(), "/small", braid.CreateOptions{Mode: 0o644, SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	writes, syncs := served(osdproto.OpWrite), served(osdproto.OpSync)
	commits, renews := c.MDS.Served(mdsproto.OpCommit), c.MDS.Served(mdsproto.OpRenew)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if n := served(osdproto.OpWrite) - writes; n != 6 {
		t.Errorf("close wrote %d units, want 6 (one per component)", n)
	}
	if n := served(osdproto.OpSync) - syncs; n != 0 {
		t.Errorf("close sent %d syncs after synced writes, want none", n)
	}
	if n := c.MDS.Served(mdsproto.OpCommit) - commits; n != 1 {
		t.Errorf("close sent %d commits, want 1", n)
	}
	if n := c.MDS.Served(mdsproto.OpRenew) - renews; n != 0 {
		t.Errorf("close sent %d lease releases after its commit released the lease, want none", n)
	}
	mustRead(t, cl, "/small", "the file", data)
	// The lease is gone: another writer opens and closes at once, and the
	// file is not scrubbed as one a dead writer left.
	g, err := cl.OpenFile(t.Context(), "/small", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("SMALL"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, cl, "/small", "the file rewritten", append([]byte("SMALL"), data[5:]...))
}

// A file created under a write-back claim and then written costs the MDS
// one request at its first write: the flush that sends its create opens
// it too. Before, the write waited for that flush and then for an open.
func TestFirstWriteOfADeferredCreateIsOneRequest(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, Pack: true})
	cl := writeBackClient(t, c)
	d := claimedDir(t, cl, "d")
	ctx := braid.WithCaller(t.Context(), asRoot)
	want := map[string][]byte{}
	for i := range 5 {
		name := fmt.Sprintf("f%d", i)
		mustDefer(t, cl, d.Ino, name)
		a, err := cl.LookupAt(ctx, d.Ino, name)
		if err != nil {
			t.Fatal(err)
		}
		flushes, opens := c.MDS.Served(mdsproto.OpDirFlush), c.MDS.Served(mdsproto.OpOpen)
		f, err := cl.OpenIno(ctx, a.Ino, true)
		if err != nil {
			t.Fatal(err)
		}
		if n := c.MDS.Served(mdsproto.OpOpen) - opens; n != 0 {
			t.Errorf("file %d: the first write's open took %d open requests, want none (it rides on the flush)", i, n)
		}
		if n := c.MDS.Served(mdsproto.OpDirFlush) - flushes; n != 1 {
			t.Errorf("file %d: %d flushes, want 1", i, n)
		}
		data := []byte(fmt.Sprintf("file %d", i))
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want[name] = data
	}
	other := c.Dial() // its look recalls the claim: everything was sent
	for name, data := range want {
		mustRead(t, other, "/d/"+name, name, data)
	}
}
