package mds_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// The MDS checks POSIX permissions with each request's identity, so a
// client holding a credential for its own uid reads and changes only
// what a mount would let that uid: the CLI run as nobody once read and
// overwrote root's 0600 files.
func TestPOSIXPermissionsAtTheMDS(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, DefaultLayout: "ec:2+1", Auth: true})
	root := c.Dial()
	user := func(uid uint32, gids ...uint32) *braid.Client {
		cred := c.Issue(auth.Principal{Name: "u", Role: auth.RoleClient, UIDs: []uint32{uid}, GIDs: gids})
		return c.DialWith(func(o *braid.Options) {
			o.Credential = cred
			o.Caller = &braid.Caller{Uid: uid, Gid: gids[0], Groups: gids[1:]}
		})
	}
	write := func(cl *braid.Client, p string, data []byte) error {
		f, err := cl.Create(ctx, p, braid.CreateOptions{Mode: 0o644})
		if err != nil {
			return err
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	mk := func(p string, mode uint32) {
		t.Helper()
		if err := root.Mkdir(ctx, p, false); err != nil {
			t.Fatal(err)
		}
		own(t, root, p, 0, 0, mode)
	}
	put := func(p string, mode uint32) {
		t.Helper()
		if err := write(root, p, []byte("root's "+p)); err != nil {
			t.Fatal(err)
		}
		own(t, root, p, 0, 0, mode)
	}
	mk("/private", 0o700)
	put("/private/secret", 0o644)
	mk("/shared", 0o755)
	put("/shared/readable", 0o644)
	put("/shared/secret", 0o600)
	mk("/group", 0o770)
	own(t, root, "/group", 0, 100, 0o770)
	mk("/tmp", 0o1777)

	bob, alice := user(1000, 1000, 100), user(1001, 1001)
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, braid.ErrDenied) && !errors.Is(err, braid.ErrPerm) {
			t.Errorf("%s: %v; want refused", what, err)
		}
	}
	_, err := bob.Stat(ctx, "/private/secret")
	refused("stat below a 0700 directory", err)
	_, err = bob.ReadDir(ctx, "/private")
	refused("list a 0700 directory", err)
	_, err = bob.Open(ctx, "/shared/secret")
	refused("open another's 0600 file", err)
	_, err = bob.OpenFile(ctx, "/shared/readable", true)
	refused("open another's 0644 file for writing", err)
	refused("create in another's 0755 directory", write(bob, "/shared/mine", []byte("x")))
	refused("remove from another's 0755 directory", bob.Remove(ctx, "/shared/readable"))
	refused("rename out of another's directory", bob.Rename(ctx, "/shared/readable", "/tmp/stolen"))
	fi, err := root.Stat(ctx, "/shared/secret")
	if err != nil {
		t.Fatal(err)
	}
	psec, err := root.Stat(ctx, "/private/secret")
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.OpenIno(ctx, psec.Ino, false)
	refused("open a 0644 file below a 0700 directory by inode", err)
	_, err = bob.GetAttr(ctx, psec.Ino)
	refused("attributes below a 0700 directory by inode", err)
	mode := uint32(0o666)
	_, err = bob.SetAttr(ctx, braid.SetAttrRequest{Ino: fi.Ino, Mode: &mode})
	refused("chmod another's file", err)

	// What the modes allow, happens.
	r, err := bob.Open(ctx, "/shared/readable")
	if err != nil {
		t.Fatalf("open a 0644 file: %v", err)
	}
	got := make([]byte, len("root's /shared/readable"))
	if _, err := r.ReadAt(got, 0); err != nil || string(got) != "root's /shared/readable" {
		t.Fatalf("read a 0644 file: %q %v", got, err)
	}
	r.Close()
	if err := write(bob, "/group/by-bob", []byte("group work")); err != nil {
		t.Fatalf("create in a directory of bob's supplementary group: %v", err)
	}
	refused("create in a group directory of another group", write(alice, "/group/by-alice", nil))
	if err := write(bob, "/tmp/bob", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if err := write(alice, "/tmp/alice", []byte("hers")); err != nil {
		t.Fatal(err)
	}
	mine, err := root.Stat(ctx, "/tmp/bob")
	if err != nil || mine.Uid != 1000 || mine.Gid != 1000 {
		t.Fatalf("bob's file: %+v, %v; want owned by 1000:1000", mine, err)
	}
	refused("remove another's file in a sticky directory", alice.Remove(ctx, "/tmp/bob"))
	refused("rename another's file in a sticky directory", alice.Rename(ctx, "/tmp/bob", "/tmp/taken"))
	if err := bob.Remove(ctx, "/tmp/bob"); err != nil {
		t.Fatalf("remove one's own file in a sticky directory: %v", err)
	}
	// A file made read-only by its creator stays writable through the
	// handle that made it, as an open descriptor does.
	f, err := bob.Create(ctx, "/tmp/readonly", braid.CreateOptions{Mode: 0o444})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("written through the creating handle"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close a 0444 file its handle wrote: %v", err)
	}
	// Requests by inode that change a file need what opening it for
	// writing needs: a raw client of uid 1000 cannot truncate, lock or
	// stage writes to root's files, take a writer's lease on them, or
	// scrub a tree.
	raw, err := wire.DialOn(ctx, auth.Network(nil, c.Issue(auth.Principal{Name: "raw", Role: auth.RoleClient, UIDs: []uint32{1000}, GIDs: []uint32{1000}}), auth.RoleMDS), c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	sec, err := root.Stat(ctx, "/shared/secret")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		op   uint16
		req  any
	}{
		{"truncate by commit", mdsproto.OpCommit, mdsproto.CommitReq{Ino: sec.Ino, Size: 0, Cut: true, LayoutVersion: sec.Layout.Version}},
		{"take a writer's lease", mdsproto.OpRenew, mdsproto.RenewReq{Ino: sec.Ino, Handle: 77}},
		{"take a reader's lease", mdsproto.OpRenew, mdsproto.RenewReq{Ino: sec.Ino, Handle: 78, Read: true}},
		{"lock extents", mdsproto.OpExtentLock, mdsproto.ExtentReq{Ino: sec.Ino, Handle: 77, Session: 5, Lo: 0, Hi: 1}},
		{"stage a write", mdsproto.OpIntentBegin, mdsproto.IntentReq{Ino: sec.Ino, Txid: 9, Version: sec.Layout.Version}},
		{"scrub the tree by inode", mdsproto.OpScrub, mdsproto.ScrubReq{Ino: 1}},
	} {
		body, err := mdsproto.Marshal(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := raw.Call(ctx, tc.op, body, nil, nil); !errors.Is(err, wire.ErrDenied) {
			t.Errorf("%s: %v; want refused", tc.what, err)
		}
	}
	if fi, err := root.Stat(ctx, "/shared/secret"); err != nil || fi.Size != sec.Size {
		t.Fatalf("root's file after the refused requests: %+v %v", fi, err)
	}

	// A mutation's stored outcome is answered only to whoever made it: a
	// retry of another's session and sequence (a create's answer holds a
	// write capability) is refused.
	named := mdsproto.CreateReq{Once: mdsproto.Once{Session: 4242, Seq: 1}, Path: "/tmp/named", Mode: 0o600, Handle: 99}
	body, err := mdsproto.Marshal(named)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := raw.Call(ctx, mdsproto.OpCreate, body, nil, nil); err != nil {
		t.Fatalf("a named create: %v", err)
	}
	other, err := wire.DialOn(ctx, auth.Network(nil, c.Issue(auth.Principal{Name: "other", Role: auth.RoleClient, UIDs: []uint32{1001}, GIDs: []uint32{1001}}), auth.RoleMDS), c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := other.Call(ctx, mdsproto.OpCreate, body, nil, nil); !errors.Is(err, wire.ErrDenied) {
		t.Errorf("another's retry of a named create: %v; want refused", err)
	}
	if _, _, err := raw.Call(ctx, mdsproto.OpCreate, body, nil, nil); err != nil {
		t.Errorf("the maker's own retry: %v", err)
	}

	// Identities the credential does not name.
	liar := c.DialWith(func(o *braid.Options) {
		o.Credential = c.Issue(auth.Principal{Name: "bob", Role: auth.RoleClient, UIDs: []uint32{1000}, GIDs: []uint32{1000}})
		o.Caller = &braid.Caller{Uid: 1001, Gid: 1001}
	})
	_, err = liar.Stat(ctx, "/tmp")
	refused("act as another uid", err)
	squashed := c.DialWith(func(o *braid.Options) {
		o.Credential = c.Issue(auth.Principal{Name: "bob", Role: auth.RoleClient, UIDs: []uint32{1000}, GIDs: []uint32{1000}})
		o.Caller = &braid.Caller{Uid: 0, Gid: 0}
	})
	_, err = squashed.Open(ctx, "/shared/secret")
	refused("root squashed: open a 0600 file", err)
	if err := write(squashed, "/tmp/squashed", nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := root.Stat(ctx, "/tmp/squashed"); err != nil || fi.Uid != 65534 {
		t.Fatalf("a squashed root's file: %+v, %v; want owned by nobody", fi, err)
	}
	// Root itself still does everything.
	if err := root.Remove(ctx, "/tmp/alice"); err != nil {
		t.Fatal(err)
	}
	data := []byte("root's /private/secret")
	r, err = root.Open(ctx, "/private/secret")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got = make([]byte, len(data))
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("root reads: %v", err)
	}
}

// A client credential for uid 2000 could hard-link uid 1000's 0600 file
// into a sticky world-writable directory by sending the link itself; the
// mount refuses it (Linux's protected_hardlinks), and so does the MDS
// now: a link to a file needs its owner, root, or a regular file neither
// setuid nor setgid-executable that the caller may read and write.
func TestHardLinkNeedsWhatProtectedHardlinksNeeds(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, DefaultLayout: "ec:2+1", Auth: true})
	root := c.Dial()
	user := func(uid uint32) *braid.Client {
		cred := c.Issue(auth.Principal{Name: "u", Role: auth.RoleClient, UIDs: []uint32{uid}, GIDs: []uint32{uid}})
		return c.DialWith(func(o *braid.Options) {
			o.Credential = cred
			o.Caller = &braid.Caller{Uid: uid, Gid: uid}
		})
	}
	if err := root.Mkdir(ctx, "/tmp", false); err != nil {
		t.Fatal(err)
	}
	own(t, root, "/tmp", 0, 0, 0o1777)
	owner, other := user(1000), user(2000)
	mkfile := func(p string, mode uint32) uint64 {
		t.Helper()
		f, err := owner.Create(ctx, p, braid.CreateOptions{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		own(t, root, p, 1000, 1000, mode)
		fi, err := root.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Ino
	}
	tmp, err := root.Stat(ctx, "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	private := mkfile("/tmp/private", 0o600)
	shared := mkfile("/tmp/shared", 0o666)
	setuid := mkfile("/tmp/setuid", 0o4777)
	for _, tc := range []struct {
		name string
		ino  uint64
	}{{"another's 0600 file", private}, {"another's setuid file", setuid}} {
		_, err := other.Link(ctx, tc.ino, tmp.Ino, "stolen")
		if !errors.Is(err, braid.ErrPerm) {
			t.Errorf("link %s: %v; want EPERM", tc.name, err)
		}
	}
	if _, err := root.Stat(ctx, "/tmp/stolen"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("a refused link left a name: %v", err)
	}
	if _, err := other.Link(ctx, shared, tmp.Ino, "shared-link"); err != nil {
		t.Errorf("link another's 0666 file: %v", err)
	}
	if _, err := owner.Link(ctx, private, tmp.Ino, "own-link"); err != nil {
		t.Errorf("link one's own 0600 file: %v", err)
	}
	if _, err := root.Link(ctx, private, tmp.Ino, "root-link"); err != nil {
		t.Errorf("root links anything: %v", err)
	}
}
