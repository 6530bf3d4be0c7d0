package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/fusefs"
	"github.com/braidfs/braid/internal/testcluster"
)

// A program writing and then reading a file through the mount never sees
// an error while OSD processes are SIGKILLed under it (ec:4+2 tolerates
// two), and the bytes verify.
func TestMountSurvivesOSDKills(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 9))
	c := StartCluster(t, 6)
	cl := c.Client()
	if err := cl.Mkdir(ctx, "/ec", false); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetLayout(ctx, "/ec", "ec:4+2,unit=256KiB"); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	srv, err := fusefs.Mount(cl, mnt, fusefs.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Unmount() })

	const size = 48 << 20
	victims := rng.Perm(len(c.OSDs))[:2]
	path := filepath.Join(mnt, "ec", "data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.New()
	src := newSeeded(seed, size)
	buf := make([]byte, 1<<20)
	for written := 0; written < size; {
		if written == size/3 {
			c.OSDs[victims[0]].Kill()
		}
		n, _ := src.Read(buf)
		if _, err := f.Write(buf[:n]); err != nil {
			t.Fatalf("write at %d with an OSD killed: %v", written, err)
		}
		want.Write(buf[:n])
		written += n
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close with an OSD killed: %v", err)
	}
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := sha256.New()
	for read := 0; ; {
		if read >= size/2 && victims != nil {
			c.OSDs[victims[1]].Kill() // a second OSD dies mid-read
			victims = nil
		}
		n, err := r.Read(buf)
		got.Write(buf[:n])
		read += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read at %d with two OSDs killed: %v", read, err)
		}
	}
	if string(got.Sum(nil)) != string(want.Sum(nil)) {
		t.Fatal("bytes read through the mount differ from those written")
	}
}

// braid mount as users run it: two mounts of one cluster see the same
// files, and SIGTERM unmounts without leaving a stale mount behind.
func TestMountCommand(t *testing.T) {
	c := StartCluster(t, 6)
	var mounts []*Proc
	var dirs []string
	for i := 0; i < 2; i++ {
		dir := filepath.Join(t.TempDir(), "m")
		p := c.start(fmt.Sprintf("mount%d", i), "mount", dir, "--mds", c.MDS.Addr, "--cred", c.Cred("mount", auth.RoleClient))
		mounts, dirs = append(mounts, p), append(dirs, dir)
		t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGTERM); <-p.done })
	}
	data := bytes.Repeat([]byte("through the mount "), 50_000)
	if err := os.WriteFile(filepath.Join(dirs[0], "shared"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dirs[1], "shared")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("second mount read %d bytes, err %v", len(got), err)
	}
	if fi, err := c.Client().Stat(ctx, "/shared"); err != nil || fi.Size != int64(len(data)) {
		t.Fatalf("the client library sees %+v, %v", fi, err)
	}
	for i, p := range mounts {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
		if st := p.cmd.ProcessState; !st.Success() {
			t.Errorf("mount %d exited %v", i, st)
		}
		mnts, _ := os.ReadFile("/proc/self/mounts")
		if bytes.Contains(mnts, []byte(dirs[i])) {
			t.Errorf("%s still mounted after SIGTERM", dirs[i])
		}
	}
}

// Creates and unlinks a mount answered under its write-back claim, some
// while the MDS was down, survive a SIGKILL of the MDS: the mount sends
// them to the restarted process, and the library lists exactly them.
func TestWriteBackSurvivesMDSSIGKILL(t *testing.T) {
	c := StartCluster(t, 6)
	dir := filepath.Join(t.TempDir(), "m")
	p := c.start("mount", "mount", dir, "--mds", c.MDS.Addr, "--cred", c.Cred("mount", auth.RoleClient))
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGTERM); <-p.done })
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("mount log:\n%s", b)
		}
	})
	testcluster.Eventually(t, 30*time.Second, func() bool {
		mnts, _ := os.ReadFile("/proc/self/mounts")
		return bytes.Contains(mnts, []byte(dir))
	}, func() string { return "the mount never appeared" })
	d := filepath.Join(dir, "wb")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	create := func(name string) {
		f, err := os.OpenFile(filepath.Join(d, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	for i := range 300 {
		create(fmt.Sprintf("f%03d", i))
		if i%5 == 0 {
			if err := os.Remove(filepath.Join(d, fmt.Sprintf("f%03d", i))); err != nil {
				t.Fatal(err)
			}
			delete(want, fmt.Sprintf("f%03d", i))
		}
	}
	c.MDS.Kill()
	for i := range 20 {
		create(fmt.Sprintf("down%02d", i)) // answered by the mount alone
	}
	c.Restart(c.MDS)
	c.WaitUp(6)
	infos, err := c.Client().ReadDir(ctx, "/wb")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, fi := range infos {
		got[fi.Name] = true
	}
	if len(got) != len(want) {
		t.Fatalf("after the MDS's SIGKILL the library lists %d names, the mount acknowledged %d", len(got), len(want))
	}
	for name := range want {
		if !got[name] {
			t.Fatalf("%s acknowledged by the mount, missing after the MDS's SIGKILL", name)
		}
	}
}
