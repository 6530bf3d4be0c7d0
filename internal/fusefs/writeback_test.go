package fusefs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
)

// Names made and removed through a mount in a directory it made (its
// write-back claim) are seen by another mount at once, with the bytes
// written to some of them; fsync of the directory reports success.
func TestWriteBackNamesThroughTwoMounts(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	m1, m2 := mountAt(t, c), mountAt(t, c)
	d1, d2 := filepath.Join(m1, "d"), filepath.Join(m2, "d")
	if err := os.Mkdir(d1, 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var want []string
	for i := range n {
		p := filepath.Join(d1, fmt.Sprintf("f%03d", i))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if _, err := fmt.Fprintf(f, "file %d", i); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if i%4 == 1 {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want = append(want, filepath.Base(p))
	}
	if _, err := os.OpenFile(filepath.Join(d1, "f000"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640); !errors.Is(err, os.ErrExist) {
		t.Fatalf("O_EXCL create of a name made here: %v", err)
	}
	wantErrno(t, "unlink of a name removed here", os.Remove(filepath.Join(d1, "f001")), syscall.ENOENT)
	st := statOf(t, filepath.Join(d1, "f002"))
	if st.Mode&0o777 != 0o640 || st.Size != 0 || st.Nlink != 1 {
		t.Fatalf("stat here of a name made here: mode %o size %d nlink %d", st.Mode&0o777, st.Size, st.Nlink)
	}
	dir, err := os.Open(d1)
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatalf("fsync of the directory: %v", err)
	}
	dir.Close()

	// The other mount: names, attributes, contents.
	entries, err := os.ReadDir(d2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the other mount lists %d names, want %d:\n%v\n%v", len(got), len(want), got, want)
	}
	if st := statOf(t, filepath.Join(d2, "f002")); st.Mode&0o777 != 0o640 || st.Size != 0 {
		t.Fatalf("the other mount's stat: mode %o size %d", st.Mode&0o777, st.Size)
	}
	b, err := os.ReadFile(filepath.Join(d2, "f010"))
	if err != nil || string(b) != "file 10" {
		t.Fatalf("the other mount reads %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(d2, "f001")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a name removed through the first mount: %v", err)
	}
	// And back: the first mount sees the second's change at once.
	if err := os.WriteFile(filepath.Join(d2, "new"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := statOf(t, filepath.Join(d1, "new")); st.Size != 1 {
		t.Fatalf("the first mount after the second made a name: size %d", st.Size)
	}
}

// A file made under a claim and unlinked while open stays usable through
// its descriptor, with no links, as on a local file system.
func TestWriteBackOpenUnlinkedFile(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	m := mountAt(t, c)
	d := filepath.Join(m, "d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d, "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Nlink != 0 {
		t.Fatalf("fstat of the open unlinked file: nlink %d, %v", st.Nlink, err)
	}
	if _, err := f.WriteAt([]byte("still here"), 0); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 10)
	if n, err := f.ReadAt(b, 0); n != 10 || string(b) != "still here" {
		t.Fatalf("read back %q, %v", b[:n], err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the name after unlink: %v", err)
	}
}

// A directory made in a directory the mount claimed keeps the claim
// (untar makes subdirectories among a directory's files): the files
// made after it are still answered here, and another mount sees every
// name, the subdirectory's link in its parent's count, and the bytes.
func TestMkdirKeepsTheClaim(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	m1, m2 := mountAt(t, c), mountAt(t, c)
	d1 := filepath.Join(m1, "d")
	if err := os.Mkdir(d1, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(filepath.Base(p)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(d1, "before"))
	if err := os.Mkdir(filepath.Join(d1, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(d1, "sub"), 0o750); !errors.Is(err, os.ErrExist) {
		t.Fatalf("mkdir of a name made here: %v, want EEXIST", err)
	}
	creates := c.MDS.Served(mdsproto.OpCreate)
	for i := range 5 {
		write(filepath.Join(d1, fmt.Sprintf("after%d", i)))
	}
	write(filepath.Join(d1, "sub", "inner"))
	// As tar does once a directory's files are in: its mode and times.
	set := time.Unix(1500000000, 0)
	if err := os.Chmod(d1, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(d1, set, set); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(d1, "late"))
	if err := os.Remove(filepath.Join(d1, "late")); err != nil {
		t.Fatal(err)
	}
	// As rm -rf does: a subdirectory emptied and removed among files.
	gone := filepath.Join(d1, "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(gone, "f"))
	if err := os.Remove(gone); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a directory with a file in it: %v, want ENOTEMPTY", err)
	}
	if err := os.Remove(filepath.Join(gone, "f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rmdir(filepath.Join(d1, "before")); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("rmdir of a file: %v, want ENOTDIR", err)
	}
	write(filepath.Join(d1, "last"))
	if err := os.Chtimes(d1, set, set); err != nil {
		t.Fatal(err)
	}
	if n := c.MDS.Served(mdsproto.OpCreate) - creates; n != 0 {
		t.Errorf("%d creates reached the MDS one by one after the mkdir and the directory's chmod, want none (the claim holds)", n)
	}
	d2 := filepath.Join(m2, "d")
	entries, err := os.ReadDir(d2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := []string{"after0", "after1", "after2", "after3", "after4", "before", "last", "sub"}
	if !slices.Equal(got, want) {
		t.Fatalf("the other mount lists %v, want %v", got, want)
	}
	if st := statOf(t, d2); st.Nlink != 3 || st.Mode&0o7777 != 0o711 || st.Mtim.Sec != set.Unix() {
		t.Errorf("the other mount: the directory has %d links, mode %o, mtime %d; want 3 (its subdirectory's ..), 711, %d",
			st.Nlink, st.Mode&0o7777, st.Mtim.Sec, set.Unix())
	}
	if st := statOf(t, filepath.Join(d2, "sub")); st.Mode&0o7777 != 0o750 || st.Mode&syscall.S_IFDIR == 0 {
		t.Errorf("the other mount: the subdirectory's mode %o", st.Mode)
	}
	for _, p := range []string{"before", "after3", "sub/inner"} {
		if b, err := os.ReadFile(filepath.Join(d2, p)); err != nil || string(b) != filepath.Base(p) {
			t.Errorf("the other mount reads %s: %q (%v)", p, b, err)
		}
	}
}
