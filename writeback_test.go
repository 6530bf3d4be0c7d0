package braid_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// writeBackClient dials a client that caches and claims the directories
// it makes, and waits until its cache has an epoch (a claim needs one).
func writeBackClient(t *testing.T, c *testcluster.Cluster) *braid.Client {
	t.Helper()
	if err := c.Dial().SetLayout(context.Background(), "/", "mirror:3"); err != nil {
		t.Fatal(err)
	}
	cl := c.DialWith(func(o *braid.Options) { o.WriteBackNames = true })
	cl.CacheMetadata(nil)
	testcluster.Eventually(t, 10*time.Second, func() bool { return braid.CacheEpoch(cl) != 0 },
		func() string { return "the cache never got an epoch" })
	return cl
}

var asRoot = braid.Caller{Uid: 0, Gid: 0}

// mustDefer creates empty file name in dir through cl's claim.
func mustDefer(t *testing.T, cl *braid.Client, dir uint64, name string) {
	t.Helper()
	ctx := braid.WithCaller(context.Background(), asRoot)
	if _, deferred, err := cl.CreateDeferredAt(ctx, dir, name, braid.CreateOptions{Mode: 0o600, Exclusive: true}); err != nil || !deferred {
		t.Fatalf("create %s: deferred %v, %v", name, deferred, err)
	}
}

// deferAndOpen creates empty file name in dir through cl's claim and
// opens it at the MDS for writing, as a writer's first write does.
func deferAndOpen(t *testing.T, cl *braid.Client, dir uint64, name string) (braid.Attr, *braid.File) {
	t.Helper()
	mustDefer(t, cl, dir, name)
	ctx := braid.WithCaller(context.Background(), asRoot)
	a, err := cl.LookupAt(ctx, dir, name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := cl.OpenIno(ctx, a.Ino, true)
	if err != nil {
		t.Fatal(err)
	}
	return a, f
}

// claimedDir makes directory name under the root and checks it was
// claimed.
func claimedDir(t *testing.T, cl *braid.Client, name string) braid.Attr {
	t.Helper()
	ctx := braid.WithCaller(context.Background(), asRoot)
	d, err := cl.MkdirAt(ctx, braid.RootIno, name, 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !braid.ClaimHeld(cl, d.Ino) {
		t.Fatalf("%s not claimed", name)
	}
	return d
}

// Creates and unlinks in a claimed directory are answered by the client
// alone; another client that looks sees every one of them at once (its
// lookup recalls the claim, which the holder releases after sending what
// it holds).
func TestWriteBackNamesSeenByOthersAtOnce(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a, b := writeBackClient(t, c), c.Dial()
	ctx := braid.WithCaller(context.Background(), asRoot)
	d := claimedDir(t, a, "wb")
	const n = 300
	for i := range n {
		_, deferred, err := a.CreateDeferredAt(ctx, d.Ino, fmt.Sprintf("f%03d", i), braid.CreateOptions{Mode: 0o640, Exclusive: true})
		if err != nil || !deferred {
			t.Fatalf("create %d: deferred %v, %v", i, deferred, err)
		}
	}
	if _, _, err := a.CreateDeferredAt(ctx, d.Ino, "f000", braid.CreateOptions{Mode: 0o640, Exclusive: true}); !errors.Is(err, braid.ErrExists) {
		t.Fatalf("second create of f000: %v, want ErrExists", err)
	}
	for i := 0; i < n; i += 3 {
		if err := a.RemoveAt(ctx, d.Ino, fmt.Sprintf("f%03d", i), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RemoveAt(ctx, d.Ino, "f000", false); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("second unlink of f000: %v, want ErrNotFound", err)
	}
	if got, err := a.LookupAt(ctx, d.Ino, "f001"); err != nil || got.Mode != 0o640 || got.Type != braid.TypeFile {
		t.Fatalf("the holder's own lookup: %+v %v", got, err)
	}
	// The holder's lookup of the directory itself, asked of the MDS once
	// its own flush recalled what its cache held of the directory, keeps
	// the claim, and shows the directory as changed here.
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		hits := braid.CacheHits(a)
		got, err := a.LookupAt(ctx, braid.RootIno, "wb")
		if err != nil || got.MtimeNs <= d.MtimeNs {
			t.Fatalf("the holder's lookup of its directory: mtime %d (made at %d), %v", got.MtimeNs, d.MtimeNs, err)
		}
		if braid.CacheHits(a) == hits {
			break // asked of the MDS
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder's cache kept its directory through its own flush")
		}
	}
	if dirs, _ := braid.ClaimedDirs(a); dirs != 1 {
		t.Fatalf("the holder's own lookup ended its claim")
	}

	// b looks: every name a acknowledged is there, and no removed one.
	x, err := b.LookupAt(ctx, d.Ino, "f001")
	if err != nil || x.Mode != 0o640 {
		t.Fatalf("another client's lookup of f001: %+v %v", x, err)
	}
	if _, err := b.LookupAt(ctx, d.Ino, "f003"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("another client's lookup of a removed name: %v", err)
	}
	entries, _, err := b.ReadDirAt(ctx, d.Ino, "", 1000)
	if err != nil || len(entries) != n-n/3 {
		t.Fatalf("listing by another client: %d entries, %v; want %d", len(entries), err, n-n/3)
	}
	if dirs, queued := braid.ClaimedDirs(a); dirs != 0 || queued != 0 {
		t.Fatalf("after the recall: %d claims, %d ops queued", dirs, queued)
	}
	// Without the claim, a's names go to the MDS as before.
	if _, deferred, err := a.CreateDeferredAt(ctx, d.Ino, "late", braid.CreateOptions{Mode: 0o600, Exclusive: true}); err != nil || deferred {
		t.Fatalf("create after the claim ended: deferred %v, %v", deferred, err)
	}
}

// A claim's inode numbers run out after reserveInoRange creates: the
// holder sends what it holds and takes a new range, and goes on.
func TestWriteBackNamesPastOneRange(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a, b := writeBackClient(t, c), c.Dial()
	ctx := braid.WithCaller(context.Background(), asRoot)
	d := claimedDir(t, a, "wb")
	const n = 8192 + 100
	for i := range n {
		_, deferred, err := a.CreateDeferredAt(ctx, d.Ino, fmt.Sprintf("f%05d", i), braid.CreateOptions{Mode: 0o600, Exclusive: true})
		if err != nil || !deferred {
			t.Fatalf("create %d: deferred %v, %v", i, deferred, err)
		}
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	var listed int
	after := ""
	for {
		entries, more, err := b.ReadDirAt(ctx, d.Ino, after, 5000)
		if err != nil {
			t.Fatal(err)
		}
		listed += len(entries)
		if !more || len(entries) == 0 {
			break
		}
		after = entries[len(entries)-1].Name
	}
	if listed != n {
		t.Fatalf("listed %d, want %d", listed, n)
	}
}

// The holder's own requests that do not know its claim (an rmdir of the
// directory, a lookup by path through it) recall the claim first, so
// they see what it held: the directory is empty once every name made in
// it was unlinked here, and a name made here is found by path.
func TestWriteBackHoldersOtherRequestsSeeItsChanges(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a := writeBackClient(t, c)
	ctx := braid.WithCaller(context.Background(), asRoot)
	d := claimedDir(t, a, "wb")
	for i := range 50 {
		mustDefer(t, a, d.Ino, fmt.Sprintf("f%d", i))
	}
	if _, err := a.Stat(ctx, "/wb/f49"); err != nil {
		t.Fatalf("stat by path of a name made under the claim: %v", err)
	}
	d2 := claimedDir(t, a, "wb2")
	for i := range 50 {
		name := fmt.Sprintf("f%d", i)
		mustDefer(t, a, d2.Ino, name)
		if err := a.RemoveAt(ctx, d2.Ino, name, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RemoveAt(ctx, braid.RootIno, "wb2", true); err != nil {
		t.Fatalf("rmdir of a claimed directory emptied here: %v", err)
	}
}

// Unlinking a file made under a claim and opened at the MDS since (a
// writer, or a handle the kernel had not released yet when the unlink
// came: close then unlink races that) keeps the claim: the remove is
// sent at once, leaving the open file to its handle with no links, and
// the directory's names stay the holder's to answer. One opened there
// and closed since is unlinked under the claim too, and deleted.
func TestWriteBackUnlinkOfAnOpenFileKeepsTheClaim(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a := writeBackClient(t, c)
	ctx := braid.WithCaller(context.Background(), asRoot)
	d := claimedDir(t, a, "wb")
	fa, f := deferAndOpen(t, a, d.Ino, "open")
	defer f.Close()
	if err := a.RemoveAt(ctx, d.Ino, "open", false); err != nil {
		t.Fatalf("unlink of a file open at the MDS: %v", err)
	}
	if !braid.ClaimHeld(a, d.Ino) {
		t.Fatal("the unlink of an open file ended the claim")
	}
	if got, err := a.GetAttr(ctx, fa.Ino); err != nil || got.Nlink != 0 {
		t.Fatalf("the open unlinked file: nlink %d, %v", got.Nlink, err)
	}
	if _, err := a.LookupAt(ctx, d.Ino, "open"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("the name after its unlink: %v", err)
	}
	if _, err := f.WriteAt([]byte("still here"), 0); err != nil {
		t.Fatalf("a write to the open unlinked file: %v", err)
	}
	mustDefer(t, a, d.Ino, "after")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// Written and closed: opened at the MDS once, open no more; its
	// unlink is held here like any other, and the MDS deletes it.
	fc, g := deferAndOpen(t, a, d.Ino, "closed")
	if _, err := g.WriteAt([]byte("bytes"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveAt(ctx, d.Ino, "closed", false); err != nil || !braid.ClaimHeld(a, d.Ino) {
		t.Fatalf("unlink of a file written and closed: %v, claim held %v", err, braid.ClaimHeld(a, d.Ino))
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	// Deleted once the MDS has its handle's release (an orphan until then).
	other := c.Dial()
	var gone error
	testcluster.Eventually(t, 10*time.Second, func() bool {
		_, gone = other.GetAttr(context.Background(), fc.Ino)
		return errors.Is(gone, braid.ErrNotFound)
	}, func() string { return fmt.Sprintf("the unlinked closed file at the MDS: %v, want ErrNotFound", gone) })
	infos, err := c.Dial().ReadDir(context.Background(), "/wb")
	if err != nil || len(infos) != 1 || infos[0].Name != "after" {
		t.Fatalf("another client lists %v, %v; want only \"after\"", infos, err)
	}
}

// An MDS restart loses no change a holder acknowledged: the claim is
// stored, and the holder sends what it holds to the new process, which
// lets no one else read the directory until it has (or until the
// holder's time is up). Creates made while the MDS was down are among
// them.
func TestWriteBackNamesSurviveAnMDSRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a, b := writeBackClient(t, c), c.Dial()
	ctx := braid.WithCaller(context.Background(), asRoot)
	d := claimedDir(t, a, "wb")
	create := func(from, to int) {
		for i := from; i < to; i++ {
			mustDefer(t, a, d.Ino, fmt.Sprintf("f%03d", i))
		}
	}
	create(0, 100)
	if err := a.RemoveAt(ctx, d.Ino, "f000", false); err != nil {
		t.Fatal(err)
	}
	addr := c.MDS.Addr()
	c.MDS.Close()
	create(100, 200) // the MDS is down: acknowledged here only
	if err := a.RemoveAt(ctx, d.Ino, "f150", false); err != nil {
		t.Fatal(err)
	}
	c.StartMDSAt(addr)
	entries, _, err := b.ReadDirAt(ctx, d.Ino, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 198 {
		t.Fatalf("after the restart another client lists %d names, want 198", len(entries))
	}
	for _, e := range entries {
		if e.Name == "f000" || e.Name == "f150" {
			t.Fatalf("%s was unlinked before the restart, and is listed", e.Name)
		}
	}
	if err := a.SyncNames(ctx); err != nil {
		t.Fatalf("the holder reports: %v", err)
	}
}

// A holder that dies with changes unsent holds up no one for longer
// than its recall's deadline: the claim is then taken away, and the
// directory is as the MDS had it.
func TestWriteBackClaimOfADeadHolderIsTakenAway(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a, b := writeBackClient(t, c), c.Dial()
	ctx := braid.WithCaller(context.Background(), asRoot)
	d := claimedDir(t, a, "wb")
	if _, _, err := a.CreateDeferredAt(ctx, d.Ino, "sent", braid.CreateOptions{Mode: 0o600, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	if err := a.SyncDir(ctx, d.Ino); err != nil {
		t.Fatal(err)
	}
	braid.CrashClient(a)
	if _, _, err := a.CreateDeferredAt(ctx, d.Ino, "unsent", braid.CreateOptions{Mode: 0o600, Exclusive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.LookupAt(ctx, d.Ino, "sent"); err != nil {
		t.Fatalf("a name the dead holder had sent: %v", err)
	}
	if _, err := b.LookupAt(ctx, d.Ino, "unsent"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("a name the dead holder had not sent: %v", err)
	}
	// The directory is an ordinary one now: b changes it.
	f, err := b.CreateAt(ctx, d.Ino, "unsent", braid.CreateOptions{Mode: 0o600, Layout: "mirror:3", SizeHint: -1, Exclusive: true})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// A client near its limit of claims gives back the one it has held
// longest, so a directory it makes after that many is still claimed (an
// untar makes more directories than the limit).
func TestOldestClaimIsGivenBackForNewDirectories(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	cl := writeBackClient(t, c)
	ctx := braid.WithCaller(context.Background(), asRoot)
	top := claimedDir(t, cl, "top")
	const made = 1100 // past the limit of 1,024
	var first, last braid.Attr
	for i := range made {
		d, err := cl.MkdirAt(ctx, top.Ino, fmt.Sprintf("d%04d", i), 0o755, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = d
		}
		last = d
	}
	if !braid.ClaimHeld(cl, last.Ino) {
		t.Fatalf("the directory made last is not claimed")
	}
	testcluster.Eventually(t, 10*time.Second, func() bool { return !braid.ClaimHeld(cl, first.Ino) },
		func() string { return "the claim held longest was never given back" })
	if dirs, _ := braid.ClaimedDirs(cl); dirs > 1024 {
		t.Fatalf("%d claims held, past the limit of 1,024", dirs)
	}
}
