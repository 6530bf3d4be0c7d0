package fusefs_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The mount behaves as a local file system does for what POSIX names:
// special files (FIFOs, sockets, device nodes), modes exactly as umask
// leaves them, set-user-ID and set-group-ID cleared on another user's
// write and on chown, ctime and mtime of parents and of the inode itself
// on every change, and nlink 0 for an open, unlinked file. One script runs
// against a local directory and against the mount; what each observes must
// be the same. (The local side is the running kernel's: braid follows
// Linux 6.x, whose writes also clear set-group-ID without group execute
// for a writer outside the file's group.)
func TestPOSIXAgainstLocalDirectory(t *testing.T) {
	_, m := mountCluster(t, 6)
	local := t.TempDir()
	for _, d := range []string{local, m} {
		// Let the other user reach both roots.
		if err := os.Chmod(filepath.Dir(d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	want := posixScript(t, local)
	got := posixScript(t, m)
	if len(want) < 40 {
		t.Fatalf("the script observed only %d things locally: %q", len(want), want)
	}
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("mount: %-60s local: %s", g, w)
		}
	}
}

// posixScript makes changes under root and returns what it observed.
func posixScript(t *testing.T, root string) []string {
	t.Helper()
	var seen []string
	note := func(format string, args ...any) { seen = append(seen, fmt.Sprintf(format, args...)) }
	p := func(name string) string { return filepath.Join(root, "p", name) }
	// Errors are observations too: the mount must fail where the local
	// directory does, and one difference should not hide the others.
	must := func(what string, err error) {
		if err != nil {
			note("%s: %v", what, errnoOf(err))
		}
	}
	stat := func(path string) unix.Stat_t {
		var st unix.Stat_t
		must("lstat "+strings.TrimPrefix(path, root), unix.Lstat(path, &st))
		return st
	}
	describe := func(name string) {
		t.Helper()
		st := stat(p(name))
		note("%s: type %s mode %04o nlink %d rdev %d:%d owner %d:%d", name, fileType(st.Mode), st.Mode&0o7777, st.Nlink,
			unix.Major(st.Rdev), unix.Minor(st.Rdev), st.Uid, st.Gid)
	}
	// changes runs op and notes whether it changed the ctime and mtime of
	// each named path ("old>new" for one op renames). It first waits for
	// the clock to pass their times (a local file system stamps with a
	// coarse clock), so a change always shows.
	changes := func(what string, op func() error, names ...string) {
		t.Helper()
		before := make([]unix.Stat_t, len(names))
		for i, n := range names {
			old, _, _ := strings.Cut(n, ">")
			before[i] = stat(p(old))
			waitClockPast(t, before[i].Ctim)
			waitClockPast(t, before[i].Mtim)
		}
		must(what, op())
		for i, n := range names {
			old, now, renamed := strings.Cut(n, ">")
			if !renamed {
				now = old
			}
			after := stat(p(now))
			note("%s: %s ctime changed %v, mtime changed %v", what, n, after.Ctim != before[i].Ctim, after.Mtim != before[i].Mtim)
		}
	}
	must("mkdir p", os.Mkdir(filepath.Join(root, "p"), 0o755))
	must("chmod p", os.Chmod(filepath.Join(root, "p"), 0o777))
	// The parent's and the inode's times.
	self := "."
	changes("create", func() error { return os.WriteFile(p("f"), []byte("abc"), 0o644) }, self)
	changes("mkdir", func() error { return os.Mkdir(p("sub"), 0o755) }, self)
	describe(".")
	changes("link", func() error { return os.Link(p("f"), p("g")) }, self, "f")
	describe("f")
	changes("unlink a second name", func() error { return os.Remove(p("g")) }, self, "f")
	describe("f")
	changes("rename", func() error { return os.Rename(p("f"), p("h")) }, self, "f>h")
	changes("rename into a subdirectory", func() error { return os.Rename(p("h"), p("sub/h")) }, self, "sub", "h>sub/h")
	changes("rename back", func() error { return os.Rename(p("sub/h"), p("h")) }, self, "sub", "sub/h>h")
	changes("rmdir", func() error { return os.Remove(p("sub")) }, self)
	describe(".")
	changes("symlink", func() error { return os.Symlink("h", p("s")) }, self)
	describe("s")
	changes("chmod", func() error { return os.Chmod(p("h"), 0o600) }, "h")
	changes("utimes", func() error { return os.Chtimes(p("h"), time.Unix(1e9, 0), time.Unix(1e9, 0)) }, "h")
	changes("write", func() error { return appendAs(0, p("h")) }, "h")
	changes("truncate", func() error { return os.Truncate(p("h"), 1) }, "h")
	changes("setxattr", func() error { return unix.Setxattr(p("h"), "user.k", []byte("v"), 0) }, "h")
	changes("chown", func() error { return os.Chown(p("h"), 1000, 1000) }, "h")
	describe("h")

	// Special files: their inodes only.
	changes("mkfifo", func() error { return unix.Mkfifo(p("fifo"), 0o640) }, self)
	describe("fifo")
	fifo, err := os.OpenFile(p("fifo"), os.O_RDWR, 0)
	must("open the fifo", err)
	_, err = fifo.Write([]byte("through the pipe"))
	must("write the fifo", err)
	buf := make([]byte, 64)
	n, err := fifo.Read(buf)
	must("read the fifo", err)
	note("fifo carried %q", buf[:n])
	must("close the fifo", fifo.Close())
	changes("mknod char", func() error { return unix.Mknod(p("chr"), unix.S_IFCHR|0o620, int(unix.Mkdev(1, 3))) }, self)
	describe("chr")
	must("mknod block", unix.Mknod(p("blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 129))))
	describe("blk")
	must("mknod regular", unix.Mknod(p("reg"), unix.S_IFREG|0o640, 0))
	describe("reg")
	if ln, err := net.Listen("unix", p("sock")); err != nil {
		must("bind a socket", err)
	} else {
		describe("sock")
		note("socket carried %q", socketRoundTrip(t, ln, p("sock")))
		must("close the socket", ln.Close())
	}
	must("remove the fifo", os.Remove(p("fifo")))
	must("rename the device", os.Rename(p("chr"), p("chr2")))
	describe("chr2")
	must("chmod the device", os.Chmod(p("chr2"), 0o666))
	describe("chr2")

	// Modes exactly as umask leaves them, 0 included.
	fd, err := unix.Open(p("zero"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0)
	must("create mode 0", err)
	must("close", unix.Close(fd))
	describe("zero")
	must("mkdir mode 0", unix.Mkdir(p("zerodir"), 0))
	describe("zerodir")
	must("mkfifo mode 0", unix.Mkfifo(p("zerofifo"), 0))
	describe("zerofifo")
	fd, err = unix.Open(p("suid"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, unix.S_ISUID|unix.S_ISGID|0o755)
	must("create mode 06755", err)
	must("close", unix.Close(fd))
	describe("suid")

	// A set-group-ID directory gives its group to what is made in it, and
	// the bit to new directories.
	must("mkdir sgid", os.Mkdir(p("sgid"), 0o755))
	must("chown sgid", os.Chown(p("sgid"), 0, 1000))
	must("chmod sgid", unix.Chmod(p("sgid"), 0o2775))
	must("create in sgid", os.WriteFile(p("sgid/f"), nil, 0o644))
	must("mkdir in sgid", os.Mkdir(p("sgid/d"), 0o755))
	must("symlink in sgid", os.Symlink("f", p("sgid/l")))
	must("mkfifo in sgid", unix.Mkfifo(p("sgid/fifo"), 0o644))
	for _, n := range []string{"sgid", "sgid/f", "sgid/d", "sgid/l", "sgid/fifo"} {
		describe(n)
	}

	// Set-user-ID and set-group-ID: cleared by another user's write (the
	// group bit only with group execute), kept by root's, cleared by
	// chown and by another user's truncate.
	for _, c := range []struct {
		name string
		mode uint32
		uid  int
		op   string
	}{
		{"w-other", 0o6777, 1000, "write"},
		{"w-other-noexec", 0o6666, 1000, "write"},
		{"w-root", 0o6777, 0, "write"},
		{"chown", 0o6755, 0, "chown"},
		{"chown-noexec", 0o6745, 0, "chown"},
		{"trunc-other", 0o6777, 1000, "truncate"},
	} {
		must("create "+c.name, os.WriteFile(p(c.name), []byte("data"), 0o644))
		must("chmod "+c.name, unix.Chmod(p(c.name), c.mode))
		switch c.op {
		case "write":
			must("write "+c.name, appendAs(c.uid, p(c.name)))
		case "chown":
			must("chown "+c.name, os.Chown(p(c.name), 1000, 1000))
		case "truncate":
			must("truncate "+c.name, asUser(c.uid, func() error { return os.Truncate(p(c.name), 1) }))
		}
		describe(c.name)
	}

	// An open file keeps its inode after its last name goes: nlink 0.
	f, err := os.OpenFile(p("h"), os.O_RDONLY, 0)
	must("open h", err)
	must("unlink h", os.Remove(p("h")))
	var st unix.Stat_t
	must("fstat", unix.Fstat(int(f.Fd()), &st))
	note("open unlinked file: nlink %d size %d", st.Nlink, st.Size)
	must("close h", f.Close())
	return seen
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "chardev"
	case unix.S_IFBLK:
		return "blockdev"
	}
	return fmt.Sprintf("unknown %o", mode&unix.S_IFMT)
}

// waitClockPast polls until the coarse clock file systems stamp with is
// past ts, at most a second.
func waitClockPast(t *testing.T, ts unix.Timespec) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		var now unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &now); err != nil {
			t.Fatal(err)
		}
		if now.Nano() > ts.Nano() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clock did not pass %d within a second", ts.Nano())
		}
		runtime.Gosched()
	}
}

// asUser runs fn on a thread whose file system identity is uid (and gid
// uid), without root's file capabilities.
func asUser(uid int, fn func() error) error {
	if uid == 0 {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the fsuid change stays on this thread, which then exits
		if err := unix.Setfsgid(uid); err != nil {
			done <- err
			return
		}
		unix.Setfsuid(uid)
		done <- fn()
	}()
	return <-done
}

// appendAs appends a line to path as user uid.
func appendAs(uid int, path string) error {
	return asUser(uid, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString("appended\n")
		return errors.Join(err, f.Close())
	})
}

// socketRoundTrip connects to the socket bound at path and echoes a line.
func socketRoundTrip(t *testing.T, ln net.Listener, path string) string {
	t.Helper()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		_, _ = c.Write([]byte(strings.ToUpper(string(buf[:n]))))
	}()
	c, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		return fmt.Sprintf("dial: %v", errnoOf(err))
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		return "write: " + err.Error()
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "read: " + err.Error()
	}
	return string(buf[:n])
}
