package braid_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// A client that caches metadata answers lookups and getattrs from memory,
// and sees every change another client makes at once: the MDS invalidates
// its cache before the change commits.
func TestMetadataCacheSeesOtherClientsAtOnce(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a, b := c.Dial(), c.Dial()
	a.CacheMetadata(nil)
	if _, err := b.MkdirAt(ctx, braid.RootIno, "d", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	dir := lookupUntilCached(t, a, braid.RootIno, "d")

	// A negative entry is cached, then the name appears.
	if _, err := a.LookupAt(ctx, dir.Ino, "x"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("lookup of a missing name: %v", err)
	}
	hits := braid.CacheHits(a)
	if _, err := a.LookupAt(ctx, dir.Ino, "x"); !errors.Is(err, braid.ErrNotFound) || braid.CacheHits(a) != hits+1 {
		t.Fatalf("a missing name again: %v, hits %d → %d (want it from memory)", err, hits, braid.CacheHits(a))
	}
	f, err := b.CreateAt(ctx, dir.Ino, "x", braid.CreateOptions{Mode: 0o640, Layout: "mirror:3", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	x, err := a.LookupAt(ctx, dir.Ino, "x")
	if err != nil || x.Size != 5 || x.Mode != 0o640 {
		t.Fatalf("after another client created x: %+v %v", x, err)
	}
	x = lookupUntilCached(t, a, dir.Ino, "x")

	// Attributes: a chmod, and a write that changes the size.
	mode := uint32(0o600)
	if _, err := b.SetAttr(ctx, braid.SetAttrRequest{Ino: x.Ino, Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.GetAttr(ctx, x.Ino); err != nil || got.Mode != 0o600 {
		t.Fatalf("after chmod elsewhere: mode %o %v", got.Mode, err)
	}
	if got, err := a.LookupAt(ctx, dir.Ino, "x"); err != nil || got.Mode != 0o600 {
		t.Fatalf("lookup after chmod elsewhere: mode %o %v", got.Mode, err)
	}
	w, err := b.OpenIno(ctx, x.Ino, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte(" world"), 5); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := a.GetAttr(ctx, x.Ino); err != nil || got.Size != 11 {
		t.Fatalf("size after a write elsewhere: %d %v", got.Size, err)
	}

	// Names: a rename, a hard link's count, a removal.
	lookupUntilCached(t, a, dir.Ino, "x")
	if err := b.RenameAt(ctx, dir.Ino, "x", dir.Ino, "y", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAt(ctx, dir.Ino, "x"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("old name after a rename elsewhere: %v", err)
	}
	if got, err := a.LookupAt(ctx, dir.Ino, "y"); err != nil || got.Ino != x.Ino {
		t.Fatalf("new name after a rename elsewhere: %+v %v", got, err)
	}
	lookupUntilCached(t, a, dir.Ino, "y")
	if _, err := b.Link(ctx, x.Ino, braid.RootIno, "z"); err != nil {
		t.Fatal(err)
	}
	if got, err := a.GetAttr(ctx, x.Ino); err != nil || got.Nlink != 2 {
		t.Fatalf("link count after a link elsewhere: %d %v", got.Nlink, err)
	}
	if err := b.RemoveAt(ctx, dir.Ino, "y", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAt(ctx, dir.Ino, "y"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("a removed name: %v", err)
	}
	if got, err := a.GetAttr(ctx, x.Ino); err != nil || got.Nlink != 1 {
		t.Fatalf("link count after a removal elsewhere: %d %v", got.Nlink, err)
	}

	// The caching client's own changes are seen by itself too.
	lookupUntilCached(t, a, braid.RootIno, "z")
	if err := a.RenameAt(ctx, braid.RootIno, "z", dir.Ino, "back", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAt(ctx, braid.RootIno, "z"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("own rename, old name: %v", err)
	}
	if got, err := a.LookupAt(ctx, dir.Ino, "back"); err != nil || got.Ino != x.Ino {
		t.Fatalf("own rename, new name: %+v %v", got, err)
	}
}

// lookupUntilCached looks name up until the cache answers it from memory
// (a grant is refused while a change of it is in flight, and for a
// moment after).
func lookupUntilCached(t *testing.T, c *braid.Client, dir uint64, name string) braid.Attr {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		hits := braid.CacheHits(c)
		a, err := c.LookupAt(ctx, dir, name)
		if err != nil {
			t.Fatalf("lookup %q: %v", name, err)
		}
		if braid.CacheHits(c) > hits {
			return a
		}
	}
	t.Fatalf("%q in %d never cached", name, dir)
	return braid.Attr{}
}

// After an MDS restart the new process knows nothing of what clients
// cache: it changes nothing until their leases have run out, and the
// caching client drops its cache when it meets the new process.
func TestMetadataCacheAcrossMDSRestart(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a, b := c.Dial(), c.Dial()
	a.CacheMetadata(nil)
	if _, err := b.MkdirAt(ctx, braid.RootIno, "d", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	lookupUntilCached(t, a, braid.RootIno, "d")
	if _, err := a.LookupAt(ctx, braid.RootIno, "e"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatal(err)
	}
	c.RestartMDS()
	if err := b.RenameAt(ctx, braid.RootIno, "d", braid.RootIno, "e", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAt(ctx, braid.RootIno, "d"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("a name renamed after an MDS restart: %v", err)
	}
	if _, err := a.LookupAt(ctx, braid.RootIno, "e"); err != nil {
		t.Fatalf("the new name after an MDS restart: %v", err)
	}
	lookupUntilCached(t, a, braid.RootIno, "e") // caching resumes with the new process
}

// The caching client's own changes come back with their answers: what it
// made, the directory as changed and what it knew of the directory before
// are answered from memory, a directory it made is known whole (a name
// not in it is answered missing from memory) — and a change by another
// client still reaches it at once.
func TestMetadataCacheKeepsOwnChanges(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a, b := cachingClient(t, c), c.Dial()
	dir, err := a.MkdirAt(ctx, braid.RootIno, "own", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("f%d", i)
		hits := braid.CacheHits(a)
		if _, err := a.LookupAt(ctx, dir.Ino, name); !errors.Is(err, braid.ErrNotFound) || braid.CacheHits(a) != hits+1 {
			t.Fatalf("%s before its create: %v, from memory %v", name, err, braid.CacheHits(a) == hits+1)
		}
		f, err := a.CreateAt(ctx, dir.Ino, name, braid.CreateOptions{Mode: 0o644, Layout: "mirror:3", SizeHint: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	hits := braid.CacheHits(a)
	for i := range 20 {
		if got, err := a.LookupAt(ctx, dir.Ino, fmt.Sprintf("f%d", i)); err != nil || got.Mode != 0o644 {
			t.Fatalf("own file: %+v %v", got, err)
		}
	}
	if got, err := a.GetAttr(ctx, dir.Ino); err != nil || got.Type != braid.TypeDir {
		t.Fatalf("own directory: %+v %v", got, err)
	}
	if n := braid.CacheHits(a) - hits; n != 21 {
		t.Fatalf("%d of 21 lookups of own changes answered from memory", n)
	}
	if err := a.RemoveAt(ctx, dir.Ino, "f3", false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAt(ctx, dir.Ino, "f3"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("own removal: %v", err)
	}
	// Another client's create in the directory known whole.
	if _, err := b.MkdirAt(ctx, dir.Ino, "theirs", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := a.LookupAt(ctx, dir.Ino, "theirs"); err != nil || got.Type != braid.TypeDir {
		t.Fatalf("another client's entry in a directory known whole: %+v %v", got, err)
	}
	if got, err := a.LookupAt(ctx, dir.Ino, "f4"); err != nil || got.Mode != 0o644 {
		t.Fatalf("own file after another client's change: %+v %v", got, err)
	}
}

// Removing many files must not stop the client from keeping what it
// knows of a directory across its own changes: each removal's recall of
// the file was once set aside like a directory's and never given back,
// and after 4,096 of them nothing more was.
func TestMetadataCacheKeepsDirectoriesAfterManyRemovals(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a := cachingClient(t, c)
	junk, err := a.MkdirAt(ctx, braid.RootIno, "junk", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	const files = 4200
	for i := range files {
		if _, err := a.Symlink(ctx, junk.Ino, fmt.Sprint(i), "t", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range files {
		if err := a.RemoveAt(ctx, junk.Ino, fmt.Sprint(i), false); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := a.MkdirAt(ctx, braid.RootIno, "d", 0o755, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := a.Symlink(ctx, dir.Ino, fmt.Sprint(i), "t", 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	hits := braid.CacheHits(a)
	for i := range 4 {
		_, _ = a.LookupAt(ctx, dir.Ino, fmt.Sprint(i))
	}
	if n := braid.CacheHits(a) - hits; n != 4 {
		t.Fatalf("%d of 4 lookups in a directory the client made and changed answered from memory", n)
	}
}

// A client with more changes waiting at the MDS than one connection
// carries at once (256) must still acknowledge their recalls: its
// standing CacheWait does not queue behind them, so it is not evicted.
func TestMetadataCacheManyChangesAtOnce(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	a := cachingClient(t, c)
	epoch := braid.CacheEpoch(a)
	if epoch == 0 {
		t.Fatal("no epoch")
	}
	const changes = 400
	var inos []uint64
	for i := range changes {
		in, err := a.Symlink(ctx, braid.RootIno, fmt.Sprint("s", i), "t", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		inos = append(inos, in.Ino)
	}
	hits := braid.CacheHits(a)
	for _, ino := range inos {
		if _, err := a.GetAttr(ctx, ino); err != nil {
			t.Fatal(err)
		}
	}
	if braid.CacheHits(a)-hits < changes/2 {
		t.Fatalf("only %d of %d new inodes cached", braid.CacheHits(a)-hits, changes)
	}
	errs := make(chan error, changes)
	for _, ino := range inos {
		go func() {
			uid := uint32(7)
			_, err := a.SetAttr(ctx, braid.SetAttrRequest{Ino: ino, Uid: &uid})
			errs <- err
		}()
	}
	for range changes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := braid.CacheEpoch(a); got != epoch {
		t.Fatalf("the cache was evicted (epoch %x → %x) while its own changes waited for it", epoch, got)
	}
}

// cachingClient dials a client that caches metadata, once its session
// has an epoch (it answers a lookup from memory).
func cachingClient(t *testing.T, c *testcluster.Cluster) *braid.Client {
	t.Helper()
	a := c.Dial()
	a.CacheMetadata(nil)
	for i := 0; i < 1000 && braid.CacheHits(a) == 0; i++ {
		_, _ = a.LookupAt(context.Background(), braid.RootIno, "nothing")
	}
	if braid.CacheHits(a) == 0 {
		t.Fatal("the cache never got an epoch")
	}
	return a
}
