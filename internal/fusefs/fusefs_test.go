package fusefs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/fusefs"
	"github.com/braidfs/braid/internal/testcluster"
)

// mountCluster starts an in-process cluster and mounts it (root and
// /dev/fuse needed: the test suite runs as root).
func mountCluster(t *testing.T, osds int) (*testcluster.Cluster, string) {
	t.Helper()
	c := testcluster.Start(t, testcluster.Options{OSDs: osds})
	return c, mountAt(t, c)
}

func mountAt(t testing.TB, c *testcluster.Cluster) string {
	t.Helper()
	_, dir := mountServer(t, c)
	return dir
}

// mountServer mounts c and returns the server too.
func mountServer(t testing.TB, c *testcluster.Cluster) (*fusefs.Server, string) {
	t.Helper()
	return mountClient(t, c.Dial())
}

// mountClient mounts through cl.
func mountClient(t testing.TB, cl *braid.Client) (*fusefs.Server, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("FUSE tests need root (the suite runs as root; see README)")
	}
	dir := t.TempDir()
	srv, err := fusefs.Mount(cl, dir, fusefs.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return srv, dir
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err %v, want %v", what, err, want)
	}
}

func TestErrnos(t *testing.T) {
	_, m := mountCluster(t, 6)
	p := func(s string) string { return filepath.Join(m, s) }
	if err := os.WriteFile(p("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p("d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := os.Open(p("missing"))
	wantErrno(t, "open missing", err, syscall.ENOENT)
	_, err = os.OpenFile(p("f"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	wantErrno(t, "O_CREAT|O_EXCL of an existing file", err, syscall.EEXIST)
	wantErrno(t, "mkdir existing", os.Mkdir(p("d"), 0o755), syscall.EEXIST)
	_, err = os.Stat(p("f/x"))
	wantErrno(t, "path through a file", err, syscall.ENOTDIR)
	wantErrno(t, "rmdir of a file", syscall.Rmdir(p("f")), syscall.ENOTDIR)
	wantErrno(t, "unlink of a directory", syscall.Unlink(p("d")), syscall.EISDIR)
	_, err = os.OpenFile(p("d"), os.O_WRONLY, 0)
	wantErrno(t, "open a directory for writing", err, syscall.EISDIR)
	wantErrno(t, "rmdir of a non-empty directory", syscall.Rmdir(p("d")), syscall.ENOTEMPTY)
	if err := os.Mkdir(p("e"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename a directory over a non-empty one", syscall.Rename(p("e"), p("d")), syscall.ENOTEMPTY)
	wantErrno(t, "rename a directory into itself", syscall.Rename(p("d"), p("d/sub/x")), syscall.EINVAL)
	wantErrno(t, "rename a file over a directory", syscall.Rename(p("f"), p("e")), syscall.EISDIR)
	wantErrno(t, "rename a directory over a file", syscall.Rename(p("e"), p("f")), syscall.ENOTDIR)
	long := strings.Repeat("n", 256)
	wantErrno(t, "create a 256-byte name", os.WriteFile(p(long), nil, 0o644), syscall.ENAMETOOLONG)
	wantErrno(t, "mkdir a 256-byte name", os.Mkdir(p(long), 0o755), syscall.ENAMETOOLONG)
	if err := os.WriteFile(p(strings.Repeat("n", 255)), nil, 0o644); err != nil {
		t.Errorf("a 255-byte name: %v", err)
	}
	wantErrno(t, "link to a directory", os.Link(p("d"), p("dl")), syscall.EPERM)
	wantErrno(t, "link over an existing name", os.Link(p("f"), p("e")), syscall.EEXIST)
	_, err = unix.Getxattr(p("f"), "user.none", make([]byte, 16))
	wantErrno(t, "getxattr of a missing attribute", err, syscall.ENODATA)
	wantErrno(t, "removexattr of a missing attribute", unix.Removexattr(p("f"), "user.none"), syscall.ENODATA)
	wantErrno(t, "renameat2 NOREPLACE onto an existing name",
		unix.Renameat2(unix.AT_FDCWD, p("f"), unix.AT_FDCWD, p(strings.Repeat("n", 255)), unix.RENAME_NOREPLACE), syscall.EEXIST)
	_, err = os.Readlink(p("f"))
	wantErrno(t, "readlink of a file", err, syscall.EINVAL)
}

func TestFileSemantics(t *testing.T) {
	_, m := mountCluster(t, 6)
	p := func(s string) string { return filepath.Join(m, s) }
	// Sparse: a write far out leaves a hole that reads as zeros.
	f, err := os.Create(p("sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("end"), 5<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p("sparse"))
	if err != nil || len(got) != 5<<20+3 || !bytes.Equal(got[:5<<20], make([]byte, 5<<20)) || string(got[5<<20:]) != "end" {
		t.Fatalf("sparse file: %d bytes, err %v", len(got), err)
	}
	// Truncate down and up: the cut bytes come back as zeros.
	if err := os.Truncate(p("sparse"), 2); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p("sparse"), 10); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("sparse")); !bytes.Equal(got, make([]byte, 10)) {
		t.Fatalf("after truncate down and up: %q", got)
	}
	// O_APPEND and O_TRUNC.
	if err := os.WriteFile(p("log"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := os.OpenFile(p("log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteString("two\n"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if got, _ := os.ReadFile(p("log")); string(got) != "one\ntwo\n" {
		t.Fatalf("O_APPEND: %q", got)
	}
	if err := os.WriteFile(p("log"), []byte("new"), 0o644); err != nil { // O_TRUNC
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("log")); string(got) != "new" {
		t.Fatalf("O_TRUNC: %q", got)
	}
	// Rename over an existing file is atomic replacement.
	if err := os.Rename(p("log"), p("sparse")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("sparse")); string(got) != "new" {
		t.Fatalf("rename over a file: %q", got)
	}
	// Hard links share data and count.
	if err := os.Link(p("sparse"), p("hard")); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p("hard"), &st); err != nil || st.Nlink != 2 {
		t.Fatalf("link count %d, err %v", st.Nlink, err)
	}
	if err := os.Remove(p("sparse")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p("hard")); string(got) != "new" {
		t.Fatalf("through the remaining link: %q", got)
	}
	// Symlinks.
	if err := os.Symlink("hard", p("soft")); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(p("soft")); err != nil || target != "hard" {
		t.Fatalf("readlink: %q %v", target, err)
	}
	if got, _ := os.ReadFile(p("soft")); string(got) != "new" {
		t.Fatalf("through the symlink: %q", got)
	}
	// chmod, chown, utimes with nanoseconds.
	if err := os.Chmod(p("hard"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p("hard"), 1234, 5678); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1_700_000_000, 123456789)
	if err := os.Chtimes(p("hard"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(p("hard"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != 0o600 || st.Uid != 1234 || st.Gid != 5678 || st.Mtim.Sec != mtime.Unix() || st.Mtim.Nsec != 123456789 {
		t.Fatalf("attributes: mode %o uid %d gid %d mtime %d.%09d", st.Mode&0o7777, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
	}
	// Extended attributes, and braid.layout on a directory and a file.
	if err := unix.Setxattr(p("hard"), "user.color", []byte("blue"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(p("hard"), "user.color", buf); err != nil || string(buf[:n]) != "blue" {
		t.Fatalf("getxattr: %q %v", buf[:n], err)
	}
	if n, err := unix.Listxattr(p("hard"), buf); err != nil || !strings.Contains(string(buf[:n]), "user.color\x00") {
		t.Fatalf("listxattr: %q %v", buf[:n], err)
	}
	if err := unix.Removexattr(p("hard"), "user.color"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p("coded"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p("coded"), braid.LayoutXattr, []byte("ec:2+1,unit=64KiB"), 0); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("layout"), 100_000)
	if err := os.WriteFile(p("coded/file"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Getxattr(p("coded/file"), braid.LayoutXattr, buf); err != nil || !strings.HasPrefix(string(buf[:n]), "ec:2+1,unit=64KiB") {
		t.Fatalf("a new file's layout: %q %v", buf[:n], err)
	}
	if got, _ := os.ReadFile(p("coded/file")); !bytes.Equal(got, data) {
		t.Fatal("coded file read back different")
	}
	// statfs reports the cluster's capacity; fsync succeeds.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(m, &sfs); err != nil || sfs.Blocks == 0 || sfs.Bavail == 0 {
		t.Fatalf("statfs: %+v %v", sfs, err)
	}
	fs, err := os.OpenFile(p("coded/file"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.WriteAt([]byte("sync"), 10); err != nil {
		t.Fatal(err)
	}
	if err := fs.Sync(); err != nil {
		t.Fatal(err)
	}
	fs.Close()
}

// A file closed on one mount is seen whole by an open on another.
func TestCloseToOpenAcrossMounts(t *testing.T) {
	c, a := mountCluster(t, 6)
	b := mountAt(t, c)
	data := bytes.Repeat([]byte("close-to-open "), 200_000)
	for round := 0; round < 3; round++ {
		data = append(data, byte(round))
		if err := os.WriteFile(filepath.Join(a, "shared"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(b, "shared"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round %d: the other mount read %d bytes (err %v), want %d", round, len(got), err, len(data))
		}
	}
}

// Listing a large directory returns every entry once, also when entries
// are removed and added while it is being listed (offsets stay valid).
func TestLargeDirectory(t *testing.T) {
	_, m := mountCluster(t, 6)
	const n = 2500 // more than two MDS pages
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("e%05d", i)
		names = append(names, name)
		if err := os.Mkdir(filepath.Join(m, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(m)
	if err != nil || len(entries) != n {
		t.Fatalf("readdir: %d entries, err %v; want %d", len(entries), err, n)
	}
	d, err := os.Open(m)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	first, err := d.ReadDir(1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range first {
		seen[e.Name()]++
	}
	removed := map[string]bool{}
	for i, name := range names {
		if seen[name] == 0 && i%2 == 0 {
			if err := syscall.Rmdir(filepath.Join(m, name)); err != nil {
				t.Fatal(err)
			}
			removed[name] = true
		}
	}
	if err := os.Mkdir(filepath.Join(m, "added"), 0o755); err != nil {
		t.Fatal(err)
	}
	rest, err := d.ReadDir(-1)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rest {
		seen[e.Name()]++
	}
	for _, name := range names {
		switch {
		case seen[name] > 1:
			t.Fatalf("%s listed %d times", name, seen[name])
		case seen[name] == 0 && !removed[name]:
			t.Fatalf("%s, never removed, was not listed", name)
		}
	}
}

// An unlinked file stays readable through a descriptor opened before,
// well past the delay after which removed files' objects are deleted, and
// goes once it is closed.
func TestUnlinkedOpenFileStaysReadable(t *testing.T) {
	c, m := mountCluster(t, 6)
	data := bytes.Repeat([]byte("still here "), 100_000)
	p := filepath.Join(m, "doomed")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat after unlink: %v", err)
	}
	deadline := time.Now().Add(4 * testcluster.DeleteDelay)
	for reads := 0; time.Now().Before(deadline) || reads < 3; reads++ {
		got := make([]byte, len(data))
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d of the unlinked file: %v", reads, err)
		}
	}
	// Reads may come from the page cache; the objects prove the data is kept.
	if n := c.ObjectFiles(); n == 0 {
		t.Fatal("the open file's objects were deleted after its unlink")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 20*time.Second, func() bool { return c.ObjectFiles() == 0 },
		func() string { return "the closed orphan's objects were never deleted" })
}

// Permission checks are the kernel's (default_permissions) against the
// owners and modes braid stores: another user cannot read a 0600 file or
// create in a 0755 directory it does not own, and can once allowed.
func TestPermissionsAsAnotherUser(t *testing.T) {
	_, m := mountCluster(t, 6)
	if err := os.Chmod(filepath.Dir(m), 0o755); err != nil { // let the other user reach the mount
		t.Fatal(err)
	}
	secret := filepath.Join(m, "secret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(m, "rootdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := os.ReadFile(secret)
	if err != nil {
		t.Fatalf("owner read: %v", err)
	}
	err = asUser(1000, func() error { _, err := os.ReadFile(secret); return err })
	wantErrno(t, "another user reads a 0600 file", err, syscall.EACCES)
	err = asUser(1000, func() error { return os.WriteFile(filepath.Join(m, "rootdir/x"), nil, 0o644) })
	wantErrno(t, "another user creates in a 0755 directory", err, syscall.EACCES)
	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := asUser(1000, func() error { _, err := os.ReadFile(secret); return err }); err != nil {
		t.Fatalf("another user reads a 0644 file: %v", err)
	}
	if err := os.Chmod(filepath.Join(m, "rootdir"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := asUser(1000, func() error { return os.WriteFile(filepath.Join(m, "rootdir/x"), nil, 0o644) }); err != nil {
		t.Fatalf("another user creates in a 0777 directory: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(m, "rootdir/x"), &st); err != nil || st.Uid != 1000 {
		t.Fatalf("new file's owner %d, err %v; want 1000", st.Uid, err)
	}
}

// Programs may mmap a file they opened for writing (writers use direct
// I/O; the mount asks the kernel to allow mmap anyway) and their stores
// reach braid. The mapping is touched from another process: a page fault
// on a FUSE file inside the process serving that FUSE mount can stall the
// Go runtime (a stop-the-world waits on the faulting thread).
func TestSharedMmapWrite(t *testing.T) {
	_, m := mountCluster(t, 6)
	p := filepath.Join(m, "mapped")
	if err := os.WriteFile(p, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 8192)
m[4096:4096+24] = b"stored through a mapping"
m.flush(); m.close(); os.close(fd)`
	if out, err := exec.Command("python3", "-c", script, p).CombinedOutput(); err != nil {
		t.Fatalf("mmap write through the mount: %v\n%s", err, out)
	}
	got, err := os.ReadFile(p)
	if err != nil || string(got[4096:4096+24]) != "stored through a mapping" {
		t.Fatalf("after the mapping: %q, %v", got[4096:4096+24], err)
	}
}

// TestMDSChecksTheMountsCallers: a mount's requests act as their callers
// at the MDS too, so a kernel deciding on stale attributes (here cached
// for an hour, across a chmod made by another client) grants nothing the
// MDS would refuse that caller.
func TestMDSChecksTheMountsCallers(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, DefaultLayout: "mirror:2"})
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil { // let the other user reach the mount
		t.Fatal(err)
	}
	stale := fusefs.Options{EntryTimeout: time.Hour, AttrTimeout: time.Hour, Name: "braid"}
	srv, err := fusefs.Mount(c.Dial(), dir, stale)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Unmount() })
	shared, f := filepath.Join(dir, "shared"), filepath.Join(dir, "shared", "f")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("data"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := asUser(1000, func() error { _, err := os.ReadFile(f); return err }); err != nil {
		t.Fatalf("uid 1000 reads a 0666 file: %v", err)
	}
	// Another client closes both; this mount's kernel does not know.
	ctx := context.Background()
	cl := c.Dial()
	for p, mode := range map[string]uint32{"/shared": 0o700, "/shared/f": 0o600} {
		fi, err := cl.Stat(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.SetAttr(ctx, braid.SetAttrRequest{Ino: fi.Ino, Mode: &mode}); err != nil {
			t.Fatal(err)
		}
	}
	err = asUser(1000, func() error { _, err := os.ReadFile(f); return err })
	wantErrno(t, "uid 1000 reads the file made 0600 elsewhere", err, syscall.EACCES)
	err = asUser(1000, func() error { return os.WriteFile(filepath.Join(shared, "new"), nil, 0o644) })
	wantErrno(t, "uid 1000 creates in the directory made 0700 elsewhere", err, syscall.EACCES)
	if got, err := os.ReadFile(f); err != nil || string(got) != "data" {
		t.Fatalf("root reads it: %q %v", got, err)
	}
}
