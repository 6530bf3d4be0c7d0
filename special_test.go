package braid_test

import (
	"context"
	"errors"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// FIFOs, sockets and device nodes are inodes only: made with their type,
// mode, owner and device number, described by Stat, refused by Open and
// by a layout (they hold no data), removed like files. A mknod of anything else is refused.
func TestSpecialFiles(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	cl := c.Dial()
	ctx := context.Background()
	for _, bad := range []struct {
		typ  string
		rdev uint64
	}{{braid.TypeFile, 0}, {braid.TypeDir, 0}, {braid.TypeSymlink, 0}, {"door", 0}, {braid.TypeFIFO, 7}, {braid.TypeSocket, 1}} {
		if _, err := cl.MknodAt(ctx, braid.RootIno, "bad", bad.typ, 0o600, bad.rdev, 0, 0); !errors.Is(err, braid.ErrInvalid) {
			t.Errorf("mknod %q rdev %d: %v, want ErrInvalid", bad.typ, bad.rdev, err)
		}
	}
	for _, typ := range []string{braid.TypeFIFO, braid.TypeSocket, braid.TypeCharDev, braid.TypeBlockDev} {
		var rdev uint64
		if typ == braid.TypeCharDev || typ == braid.TypeBlockDev {
			rdev = 0x1234_5678_9abc
		}
		a, err := cl.MknodAt(ctx, braid.RootIno, typ, typ, 0o2640, rdev, 12, 34)
		if err != nil {
			t.Fatalf("mknod %s: %v", typ, err)
		}
		if a.Type != typ || a.Mode != 0o2640 || a.Rdev != rdev || a.Uid != 12 || a.Gid != 34 || a.Nlink != 1 {
			t.Errorf("mknod %s: %+v", typ, a)
		}
		fi, err := cl.Stat(ctx, "/"+typ)
		if err != nil || fi.Type != typ || fi.Rdev != rdev || fi.Layout != nil || fi.Mode.IsRegular() || fi.Mode.Perm() != 0o640 {
			t.Errorf("stat %s: %+v, %v", typ, fi, err)
		}
		if _, err := cl.Open(ctx, "/"+typ); !errors.Is(err, braid.ErrInvalid) {
			t.Errorf("open %s: %v, want ErrInvalid", typ, err)
		}
		if err := cl.SetLayout(ctx, "/"+typ, "mirror:2"); !errors.Is(err, braid.ErrInvalid) {
			t.Errorf("set a layout on a %s: %v, want ErrInvalid (it holds no data)", typ, err)
		}
		if _, err := cl.Xattr(ctx, braid.XattrRequest{Ino: a.Ino, Op: "set", Name: braid.LayoutXattr, Value: []byte("mirror:2")}); !errors.Is(err, braid.ErrInvalid) {
			t.Errorf("set braid.layout on a %s: %v, want ErrInvalid", typ, err)
		}
		if _, err := cl.MknodAt(ctx, braid.RootIno, typ, typ, 0o600, rdev, 0, 0); !errors.Is(err, braid.ErrExists) {
			t.Errorf("second mknod %s: %v, want ErrExists", typ, err)
		}
	}
	rep, err := cl.Check(ctx, "/")
	if err != nil || rep.Skipped != 4 || len(rep.Problems) != 0 {
		t.Errorf("check: %+v, %v", rep, err)
	}
	for _, typ := range []string{braid.TypeFIFO, braid.TypeSocket, braid.TypeCharDev, braid.TypeBlockDev} {
		if err := cl.Remove(ctx, "/"+typ); err != nil {
			t.Errorf("remove %s: %v", typ, err)
		}
	}
	if ents, err := cl.ReadDir(ctx, "/"); err != nil || len(ents) != 0 {
		t.Errorf("after removing: %v, %v", ents, err)
	}
}
