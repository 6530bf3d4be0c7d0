package braid_test

import (
	"bytes"
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
