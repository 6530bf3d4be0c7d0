package e2e

import (
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/braidfs/braid/internal/fusefs"
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
