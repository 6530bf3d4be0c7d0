package fusefs_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/braidfs/braid/internal/testcluster"
)

// A change made through one mount is seen by another at once: names,
// negative names, attributes by path and by open descriptor, sizes. No
// waiting: the MDS invalidated the other mount's cache before committing.
func TestTwoMountsSeeChangesAtOnce(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	m1, m2 := mountAt(t, c), mountAt(t, c)
	p1 := func(s string) string { return filepath.Join(m1, s) }
	p2 := func(s string) string { return filepath.Join(m2, s) }
	if err := os.Mkdir(p2("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 3 { // cached negative entry
		if _, err := os.Stat(p1("d/f")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat of a missing name: %v", err)
		}
	}
	if err := os.WriteFile(p2("d/f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := statOf(t, p1("d/f"))
	if st.Size != 5 || st.Mode&0o777 != 0o644 {
		t.Fatalf("after create elsewhere: size %d mode %o", st.Size, st.Mode)
	}
	fd, err := os.Open(p1("d/f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	statOf(t, p1("d/f"))
	if err := os.Chmod(p2("d/f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, p1("d/f")); st.Mode&0o777 != 0o600 {
		t.Fatalf("stat after chmod elsewhere: mode %o", st.Mode)
	}
	var fst syscall.Stat_t
	if err := syscall.Fstat(int(fd.Fd()), &fst); err != nil || fst.Mode&0o777 != 0o600 {
		t.Fatalf("fstat after chmod elsewhere: mode %o %v", fst.Mode, err)
	}
	if err := os.WriteFile(p2("d/f"), []byte("hello, world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, p1("d/f")); st.Size != 12 {
		t.Fatalf("size after a write elsewhere: %d", st.Size)
	}
	if err := syscall.Fstat(int(fd.Fd()), &fst); err != nil || fst.Size != 12 {
		t.Fatalf("fstat size after a write elsewhere: %d %v", fst.Size, err)
	}
	if err := os.Rename(p2("d/f"), p2("g")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p1("d/f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old name after a rename elsewhere: %v", err)
	}
	if st := statOf(t, p1("g")); st.Size != 12 {
		t.Fatalf("new name after a rename elsewhere: size %d", st.Size)
	}
	if err := os.Link(p2("g"), p2("d/h")); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, p1("g")); st.Nlink != 2 {
		t.Fatalf("link count after a link elsewhere: %d", st.Nlink)
	}
	if err := os.Remove(p2("g")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p1("g")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a name removed elsewhere: %v", err)
	}
	if st := statOf(t, p1("d/h")); st.Nlink != 1 {
		t.Fatalf("link count after a removal elsewhere: %d", st.Nlink)
	}
	if err := os.Remove(p2("d/h")); err != nil {
		t.Fatal(err)
	}
	// A directory's name, which the kernel may keep: renamed, made
	// again, removed elsewhere.
	if err := os.Mkdir(p2("d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		statOf(t, p1("d/sub"))
	}
	if err := os.Rename(p2("d/sub"), p2("d/sub2")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p1("d/sub")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a directory renamed elsewhere, old name: %v", err)
	}
	statOf(t, p1("d/sub2"))
	if err := os.Mkdir(p2("d/sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, p1("d/sub")); st.Mode&0o777 != 0o700 {
		t.Fatalf("a directory made again elsewhere: mode %o", st.Mode)
	}
	for _, d := range []string{"d/sub", "d/sub2"} {
		if err := os.Remove(p2(d)); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p1(d)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a directory removed elsewhere: %v", err)
		}
	}
	if err := os.Remove(p2("d")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p1("d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a directory removed elsewhere: %v", err)
	}
}

func statOf(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return st
}

// The kernel keeps names for the cache's lease (epoch.go): stats of a
// path it has looked up ask the mount nothing, until another mount
// changes the directory; then the names are asked for again, and the
// change is seen at once.
func TestKernelKeepsNamesUntilAChange(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	srv1, m1 := mountServer(t, c)
	m2 := mountAt(t, c)
	if !srv1.KeepsNames() {
		t.Skip("the kernel takes no FUSE_NOTIFY_INC_EPOCH (Linux 6.16 and later do): names are not kept")
	}
	if err := os.MkdirAll(filepath.Join(m1, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m1, "a/b/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(m1, "a/b/f")
	statOf(t, f)
	before := srv1.Lookups()
	for range 20 {
		statOf(t, f)
	}
	if n := srv1.Lookups() - before; n != 0 {
		t.Fatalf("20 stats of a kept path asked the mount %d lookups", n)
	}
	if err := os.Rename(filepath.Join(m2, "a/b/f"), filepath.Join(m2, "a/b/g")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a name renamed elsewhere: %v", err)
	}
	if st := statOf(t, filepath.Join(m1, "a/b/g")); st.Size != 1 {
		t.Fatalf("the new name: size %d", st.Size)
	}
	// The directory above, renamed elsewhere while its names are kept.
	statOf(t, filepath.Join(m1, "a/b/g"))
	if err := os.Rename(filepath.Join(m2, "a/b"), filepath.Join(m2, "a/c")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m1, "a/b/g")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("below a directory renamed elsewhere: %v", err)
	}
	statOf(t, filepath.Join(m1, "a/c/g"))
}
