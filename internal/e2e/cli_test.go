package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/testcluster"
	"golang.org/x/sys/unix"
)

// cliEnv runs braid commands the way a user in a second terminal would:
// no --mds flag, the cluster found through the state file.
type cliEnv struct {
	t     *testing.T
	bin   string
	state string // XDG_STATE_HOME
}

func (e cliEnv) run(args ...string) (string, string, error) {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+e.state, "BRAID_MDS=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func (e cliEnv) must(args ...string) string {
	e.t.Helper()
	out, stderr, err := e.run(args...)
	if err != nil {
		e.t.Fatalf("braid %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func (e cliEnv) fails(wantInErr string, args ...string) {
	e.t.Helper()
	_, stderr, err := e.run(args...)
	if err == nil || !strings.Contains(stderr, wantInErr) {
		e.t.Fatalf("braid %s: err %v, stderr %q; want failure mentioning %q", strings.Join(args, " "), err, stderr, wantInErr)
	}
}

type upProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncBuffer
}

// interrupt is a terminal's Ctrl-C: SIGINT to up's whole process group.
func (p *upProc) interrupt() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
}

// syncBuffer is written by exec's output copier while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startUp(t *testing.T, e cliEnv, dir string, extra ...string) *upProc {
	t.Helper()
	cmd := exec.Command(e.bin, append([]string{"up", "--dir", dir, "--osds", "4", "--osd-down-after", "2s"}, extra...)...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+e.state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own, as in a terminal (upProc.interrupt)
	p := &upProc{cmd: cmd, done: make(chan struct{}), out: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGINT); <-p.done })
	stateFile := filepath.Join(e.state, "braid", "cluster.json")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(stateFile); err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("braid up exited: %s", p.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("braid up not ready: %s", p.out)
	return nil
}

type statusJSON struct {
	CapacityBytes int64 `json:"capacity_bytes"`
	OSDs          []struct {
		ID    uint32 `json:"id"`
		Addr  string `json:"addr"`
		State string `json:"state"`
		Pid   int    `json:"pid"`
	} `json:"osds"`
}

func TestBraidUpWorkflow(t *testing.T) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	dir := filepath.Join(t.TempDir(), "cluster")
	up := startUp(t, e, dir)
	// The state file is written before the endpoints are printed.
	testcluster.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(up.out.String(), "mds") && strings.Contains(up.out.String(), "osd3")
	}, func() string { return fmt.Sprintf("braid up did not print endpoints: %s", up.out) })
	local := filepath.Join(t.TempDir(), "in")
	data := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.8 MB
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.must("mkdir", "-p", "/x/y")
	e.must("put", local, "/x/f", "--layout", "ec:2+1,unit=256KiB")
	if out := e.must("ls", "/x"); !strings.Contains(out, " f") || !strings.Contains(out, "y/") {
		t.Fatalf("ls /x: %q", out)
	}
	stat := e.must("stat", "/x/f")
	if !strings.Contains(stat, "ec:2+1,unit=256KiB") || strings.Count(stat, "127.0.0.1:") != 3 {
		t.Fatalf("stat does not show layout and 3 components:\n%s", stat)
	}
	e.must("layout", "set", "/x/y", "mirror:2")
	if out := e.must("layout", "get", "/x/y"); !strings.HasPrefix(out, "mirror:2") {
		t.Fatalf("layout get: %q", out)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(e.must("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.OSDs) != 4 {
		t.Fatalf("status --json lists %d OSDs", len(st.OSDs))
	}
	for _, o := range st.OSDs {
		if o.ID == 0 || o.Addr == "" || o.State != "up" || o.Pid <= 0 {
			t.Fatalf("status --json OSD entry incomplete: %+v", o)
		}
	}
	// The four OSDs share the test directory's disk: counted once (it
	// was "1.5 TiB" of a 252 GB disk with six).
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if disk := int64(fs.Blocks) * fs.Bsize; st.CapacityBytes <= 0 || st.CapacityBytes > disk {
		t.Fatalf("status capacity %d bytes; the OSDs' one disk holds %d", st.CapacityBytes, disk)
	}
	// Bad input: clear errors, non-zero exit.
	e.fails("needs 10 OSDs", "put", local, "/bad", "--layout", "ec:8+2")
	e.fails("unknown scheme", "put", local, "/bad", "--layout", "raid9:2")
	e.fails("not found", "get", "/nope", filepath.Join(t.TempDir(), "out"))
	e.fails("not found", "stat", "/x/nope")
	e.fails("not empty", "rm", "/x")

	// get into a FIFO (as into /dev/null) writes through it, leaving it a FIFO.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fromFIFO := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // blocks until get opens the FIFO
		fromFIFO <- b
	}()
	e.must("get", "/x/f", fifo)
	select {
	case got := <-fromFIFO:
		if !bytes.Equal(got, data) {
			t.Fatalf("get into a FIFO delivered %d bytes, want %d", len(got), len(data))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("get never wrote into the FIFO")
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("get replaced the FIFO it wrote into: %v %v", fi.Mode(), err)
	}

	// SIGKILL an OSD; the file still reads (degraded), and status shows it down.
	victim := st.OSDs[1]
	_ = syscall.Kill(victim.Pid, syscall.SIGKILL)
	out := filepath.Join(t.TempDir(), "out")
	e.must("get", "/x/f", out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("get after SIGKILL of an OSD returned different bytes")
	}
	testcluster.Eventually(t, 20*time.Second, func() bool {
		var st2 statusJSON
		_ = json.Unmarshal([]byte(e.must("status", "--json")), &st2)
		return len(st2.OSDs) == 4 && st2.OSDs[1].State == "down"
	}, func() string { return "killed OSD never shown down" })

	// Ctrl-C stops everything and removes the state file.
	_ = up.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-up.done:
	case <-time.After(30 * time.Second):
		t.Fatal("braid up did not stop on SIGINT")
	}
	for _, o := range st.OSDs {
		if syscall.Kill(o.Pid, 0) == nil {
			t.Errorf("OSD pid %d still running after braid up stopped", o.Pid)
		}
	}
	e.fails("no cluster", "ls", "/")

	// Started again, the same data is there (the killed OSD is back too),
	// also when the OSDs now keep writes in the page cache; capabilities
	// now last 3 s, so what follows outlives several.
	startUp(t, e, dir, "--write-cache", "--cap-ttl", "3s")
	e.must("get", "/x/f", out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("data differs after braid up restart")
	}

	// Credentials: one for uid 1000 neither administers nor writes where
	// uid 1000 may not; the capability key rotates under a running cluster.
	bobCred := filepath.Join(t.TempDir(), "bob.cred")
	e.must("cred", "issue", "--ca", filepath.Join(dir, "auth"), "--role", "client", "--name", "bob", "--uid", "1000", "--gid", "1000", "-o", bobCred)
	e.fails("may not drain", "--cred", bobCred, "osd", "drain", "1")
	e.fails("permission denied", "--cred", bobCred, "put", local, "/by-bob")
	if out := e.must("key", "rotate"); !strings.Contains(out, "is current") {
		t.Fatalf("key rotate: %q", out)
	}
	e.must("put", local, "/x/after-rotation")
	e.must("get", "/x/after-rotation", out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("data written after a key rotation differs")
	}
	e.must("rm", "/x/after-rotation")

	// Self-healing commands.
	if out := e.must("status"); !strings.Contains(out, "health: ok") {
		t.Fatalf("status without health ok:\n%s", out)
	}
	if out := e.must("osd", "add"); !strings.Contains(out, "added OSD") {
		t.Fatalf("osd add: %q", out)
	}
	testcluster.Eventually(t, 20*time.Second, func() bool {
		var st3 statusJSON
		_ = json.Unmarshal([]byte(e.must("status", "--json")), &st3)
		return len(st3.OSDs) == 5 && st3.OSDs[4].State == "up"
	}, func() string { return "added OSD never up" })
	if out := e.must("scrub", "/"); !strings.Contains(out, "scrubbed 1 files") {
		t.Fatalf("scrub: %q", out)
	}
	if out := e.must("check", "/"); !strings.Contains(out, "0 problems") {
		t.Fatalf("check: %q", out)
	}
	if out := e.must("osd", "drain", strconv.Itoa(int(st.OSDs[0].ID))); !strings.Contains(out, "holds nothing") {
		t.Fatalf("osd drain: %q", out)
	}
	e.must("get", "/x/f", out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("data differs after drain")
	}
	e.fails("is up", "osd", "rm", strconv.Itoa(int(st.OSDs[0].ID)))
}

// A put that fails midway (the OSDs fill up) leaves the file it was
// replacing whole, and a new name nothing.
func TestPutIsAtomic(t *testing.T) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	startUp(t, e, filepath.Join(t.TempDir(), "cluster"), "--capacity", "4MiB")
	dir := t.TempDir()
	small, big := filepath.Join(dir, "small"), filepath.Join(dir, "big")
	old := bytes.Repeat([]byte("old bytes "), 100_000) // 1 MB
	if err := os.WriteFile(small, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, bytes.Repeat([]byte("new"), 10<<20), 0o644); err != nil { // 30 MB
		t.Fatal(err)
	}
	testcluster.Eventually(t, 20*time.Second, func() bool {
		_, _, err := e.run("put", small, "/f")
		return err == nil
	}, func() string { return "first put never succeeded" })
	e.fails("no space", "put", big, "/f")
	out := filepath.Join(dir, "out")
	e.must("get", "/f", out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, old) {
		t.Fatalf("after a failed put over it, /f holds %d bytes, want the old %d", len(got), len(old))
	}
	e.fails("no space", "put", big, "/new")
	e.fails("not found", "stat", "/new")
}

// Names given to the CLI are bytes: two names that differ only in bytes
// that are not UTF-8 are two files, listed and read back exactly.
func TestCLINamesAreBytes(t *testing.T) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	startUp(t, e, filepath.Join(t.TempDir(), "cluster"))
	dir := t.TempDir()
	names := []string{"n\xff", "n\xfe", "a<b>&c", strings.Repeat("\xc3", 255)}
	for i, n := range names {
		src := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(src, []byte{byte('0' + i)}, 0o644); err != nil {
			t.Fatal(err)
		}
		testcluster.Eventually(t, 20*time.Second, func() bool {
			_, _, err := e.run("put", src, "/"+n)
			return err == nil
		}, func() string { return fmt.Sprintf("put %q never succeeded", n) })
	}
	listing := e.must("ls", "/")
	for i, n := range names {
		if !strings.Contains(listing, " "+n+"\n") {
			t.Errorf("ls / does not show %q:\n%q", n, listing)
		}
		if got := e.must("get", "/"+n, "-"); got != string(rune('0'+i)) {
			t.Errorf("get %q: %q, want %q", n, got, string(rune('0'+i)))
		}
	}
}

// braid stat, ls and check handle every file type: made through the
// mount, each is described for what it is (a symlink once printed "type:
// file" and then panicked), listed, and skipped by check, which verifies
// only what holds data.
func TestCLIEveryFileType(t *testing.T) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	mnt := t.TempDir()
	startUp(t, e, filepath.Join(t.TempDir(), "cluster"), "--mount", mnt)
	testcluster.Eventually(t, 30*time.Second, func() bool { return isMounted(mnt) },
		func() string { return "braid up --mount: no mount" })
	at := func(name string) string { return filepath.Join(mnt, name) }
	testcluster.Eventually(t, 30*time.Second, func() bool {
		return os.WriteFile(at("file"), []byte("data"), 0o755) == nil
	}, func() string { return "no write through the mount" })
	for what, err := range map[string]error{
		"symlink": os.Symlink("file", at("link")),
		"mkdir":   unix.Mkdir(at("dir"), 0o755),
		"fifo":    unix.Mkfifo(at("fifo"), 0o600),
		"chardev": unix.Mknod(at("chardev"), unix.S_IFCHR|0o600, int(unix.Mkdev(4, 64))),
		"blkdev":  unix.Mknod(at("blkdev"), unix.S_IFBLK|0o600, int(unix.Mkdev(8, 1))),
		"socket":  unix.Mknod(at("socket"), unix.S_IFSOCK|0o755, 0),
	} {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// Modes past the umask.
	for name, mode := range map[string]uint32{"file": 0o4755, "dir": 0o1777, "chardev": 0o620} {
		if err := unix.Chmod(at(name), mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string][]string{
		"/file":    {"type:     file", "mode:     urwxr-xr-x", "layout:"},
		"/link":    {"type:     symlink", "target:   file"},
		"/dir":     {"type:     directory", "mode:     dtrwxrwxrwx"},
		"/fifo":    {"type:     fifo", "mode:     prw-------"},
		"/chardev": {"type:     character device", "mode:     Dcrw--w----", "device:   4:64"},
		"/blkdev":  {"type:     block device", "mode:     Drw-------", "device:   8:1"},
		"/socket":  {"type:     socket", "mode:     Srwxr-xr-x"},
	} {
		out := e.must("stat", name)
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("braid stat %s: no %q in\n%s", name, w, out)
			}
		}
	}
	listing := e.must("ls", "/")
	for _, w := range []string{"prw------- ", "Dcrw--w---- ", "Drw------- ", "Srwxr-xr-x ", "Lrwxrwxrwx ", "dtrwxrwxrwx "} {
		if !strings.Contains(listing, w) {
			t.Errorf("braid ls /: no %q in\n%s", w, listing)
		}
	}
	out := e.must("check", "/")
	if !strings.Contains(out, "0 problems") {
		t.Errorf("braid check /: %s", out)
	}
}
