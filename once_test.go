package braid_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// Namespace mutations run exactly once. The MDS loses about one reply in seven
// after it acted (the client sees a broken connection and sends the
// request again): every create, mkdir, link, symlink, mknod, exclusive
// xattr, rename and remove still answers as if sent once — a retried
// create is not EEXIST, a retried remove or rename is not ENOENT — and
// the namespace ends as the operations say.
func TestMutationsRunOnceDespiteLostReplies(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			nw := simnet.New()
			c := testcluster.Start(t, testcluster.Options{OSDs: 3, Network: nw, RepairWorkers: -1})
			cl := c.Dial()
			ctx := context.Background()
			nw.LoseReplies(c.MDS.Addr(), 20, seed) // one write in 20: a frame is three writes
			const n = 40
			for i := range n {
				name := fmt.Sprint("f", i)
				must := func(what string, err error) {
					t.Helper()
					if err != nil {
						t.Fatalf("seed %d: %s %s: %v", seed, what, name, err)
					}
				}
				f, err := cl.CreateAt(ctx, braid.RootIno, name, braid.CreateOptions{Mode: 0o640, SizeHint: 0, Exclusive: true, Layout: "mirror:3"})
				must("create", err)
				ino := f.Attr().Ino
				must("close", f.Close())
				d, err := cl.MkdirAt(ctx, braid.RootIno, "d"+name, 0o755, 0, 0)
				must("mkdir", err)
				l, err := cl.Link(ctx, ino, d.Ino, "link")
				must("link", err)
				if l.Ino != ino || l.Nlink != 2 {
					t.Fatalf("seed %d: link %s: %+v, want ino %d with 2 links", seed, name, l, ino)
				}
				_, err = cl.Symlink(ctx, d.Ino, "sym", name, 0, 0)
				must("symlink", err)
				_, err = cl.MknodAt(ctx, d.Ino, "fifo", braid.TypeFIFO, 0o600, 0, 0, 0)
				must("mknod", err)
				_, err = cl.Xattr(ctx, braid.XattrRequest{Ino: ino, Op: mdsproto.XattrSet, Name: "user.k", Value: []byte("v"), Flags: mdsproto.XattrCreate})
				must("setxattr (create)", err)
				must("rename", cl.RenameAt(ctx, braid.RootIno, name, d.Ino, "moved", true))
				must("remove", cl.RemoveAt(ctx, d.Ino, "link", false))
				must("remove", cl.RemoveAt(ctx, d.Ino, "fifo", false))
			}
			lost := nw.LostReplies(c.MDS.Addr())
			nw.LoseReplies(c.MDS.Addr(), 0, 0)
			if lost < n/2 {
				t.Fatalf("seed %d: only %d replies lost: the test did not test", seed, lost)
			}
			ents, err := cl.ReadDir(ctx, "/")
			if err != nil || len(ents) != n {
				t.Fatalf("seed %d: / holds %d entries (%v), want %d directories", seed, len(ents), err, n)
			}
			for i := range n {
				ents, err := cl.ReadDir(ctx, fmt.Sprint("/df", i))
				if err != nil || len(ents) != 2 || ents[0].Name != "moved" || ents[1].Name != "sym" || ents[0].Nlink != 1 {
					t.Fatalf("seed %d: /df%d holds %+v (%v), want moved (1 link) and sym", seed, i, ents, err)
				}
			}
			t.Logf("seed %d: %d replies lost", seed, lost)
		})
	}
}

// A mutation's outcome is stored with it, so a retry that reaches a
// restarted MDS still gets the original answer; a request with the same
// name but another op is refused, and an unnamed retry runs again.
func TestMutationRecordsSurviveRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	ctx := context.Background()
	send := func(op uint16, req, out any) error {
		t.Helper()
		conn, err := wire.Dial(ctx, c.MDS.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body, err := mdsproto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		meta, _, err := conn.Call(ctx, op, body, nil, nil)
		if err == nil && out != nil {
			err = mdsproto.Unmarshal(meta, out)
		}
		return err
	}
	once := mdsproto.Once{Session: 77, Seq: 1, Floor: 1}
	mk := mdsproto.MkdirReq{Once: once, Path: "/d", Mode: 0o700}
	var first, again mdsproto.Inode
	if err := send(mdsproto.OpMkdir, mk, &first); err != nil {
		t.Fatal(err)
	}
	c.RestartMDS()
	if err := send(mdsproto.OpMkdir, mk, &again); err != nil || again.Ino != first.Ino || again.Mode != 0o700 {
		t.Fatalf("retried mkdir after a restart: %+v, %v; want inode %d", again, err, first.Ino)
	}
	rm := mdsproto.PathReq{Once: mdsproto.Once{Session: 77, Seq: 2, Floor: 1}, Path: "/d"}
	for i := range 2 {
		if err := send(mdsproto.OpRemove, rm, nil); err != nil {
			t.Fatalf("remove, sent %d times: %v", i+1, err)
		}
		c.RestartMDS()
	}
	if err := send(mdsproto.OpRename, mdsproto.RenameReq{Once: rm.Once, From: "/x", To: "/y"}, nil); !errors.Is(err, wire.ErrInvalid) {
		t.Errorf("another op under a used name: %v, want ErrInvalid", err)
	}
	if err := send(mdsproto.OpRemove, mdsproto.PathReq{Path: "/d"}, nil); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("an unnamed remove of what is gone: %v, want ErrNotFound", err)
	}
	// Records below the floor go: the mkdir's (seq 1) goes once the floor passes it.
	if err := send(mdsproto.OpMkdir, mdsproto.MkdirReq{Once: mdsproto.Once{Session: 77, Seq: 3, Floor: 3}, Path: "/e", Mode: 0o700}, nil); err != nil {
		t.Fatal(err)
	}
	if err := send(mdsproto.OpMkdir, mk, &again); err != nil || again.Ino == first.Ino {
		t.Errorf("a retry below the floor: %+v, %v; want it to run again (a new /d: the first was removed)", again, err)
	}
}
