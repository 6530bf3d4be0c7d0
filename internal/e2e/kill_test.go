package e2e

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/braidfs/braid"
)

var ctx = context.Background()

// seeded is a reader of n deterministic pseudo-random bytes that calls
// hook once when it has produced hookAt bytes.
type seeded struct {
	rng    *rand.Rand
	n, pos int64
	cur    uint64
	left   int
	hookAt int64
	hook   func()
}

func newSeeded(seed uint64, n int64) *seeded {
	return &seeded{rng: rand.New(rand.NewPCG(seed, seed+1)), n: n, hookAt: -1}
}

func (s *seeded) Read(p []byte) (int, error) {
	if s.pos >= s.n {
		return 0, io.EOF
	}
	if s.hook != nil && s.pos >= s.hookAt {
		s.hook()
		s.hook = nil
	}
	limit := s.n - s.pos
	if s.hook != nil {
		limit = min(limit, s.hookAt-s.pos) // stop exactly where the hook fires
	}
	p = p[:min(int64(len(p)), limit)]
	for i := range p {
		if s.left == 0 {
			s.cur, s.left = s.rng.Uint64(), 8
		}
		p[i] = byte(s.cur)
		s.cur >>= 8
		s.left--
	}
	s.pos += int64(len(p))
	return len(p), nil
}

func sum(seed uint64, n int64) [32]byte {
	h := sha256.New()
	_, _ = io.Copy(h, newSeeded(seed, n))
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// hashingWriter hashes what it receives and calls hook once past hookAt.
type hashingWriter struct {
	h      io.Writer
	sumFn  func() []byte
	n      int64
	hookAt int64
	hook   func()
}

func newHashingWriter() *hashingWriter {
	h := sha256.New()
	return &hashingWriter{h: h, sumFn: func() []byte { return h.Sum(nil) }, hookAt: -1}
}

func (w *hashingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.hook != nil && w.n >= w.hookAt {
		w.hook()
		w.hook = nil
	}
	return w.h.Write(p)
}

func (w *hashingWriter) sum() [32]byte {
	var out [32]byte
	copy(out[:], w.sumFn())
	return out
}

func putSeeded(t *testing.T, cl *braid.Client, path, spec string, seed uint64, n int64, killAt int64, kill func()) {
	t.Helper()
	f, err := cl.Create(ctx, path, braid.CreateOptions{Layout: spec, SizeHint: n})
	if err != nil {
		t.Fatal(err)
	}
	src := newSeeded(seed, n)
	src.hookAt, src.hook = killAt, kill
	if _, err := f.ReadFrom(src); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", path, err)
	}
}

func checkSeeded(t *testing.T, cl *braid.Client, path string, seed uint64, n int64, killAt int64, kill func()) {
	t.Helper()
	f, err := cl.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := newHashingWriter()
	w.hookAt, w.hook = killAt, kill
	if _, err := f.WriteTo(w); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if w.n != n || w.sum() != sum(seed, n) {
		t.Fatalf("%s: read %d bytes with sha256 %x, want %d bytes %x", path, w.n, w.sum(), n, sum(seed, n))
	}
}

// TestSIGKILLDuringWritesAndReads kills OSD processes in the middle of
// writes and of reads; every acknowledged file must read back whole.
func TestSIGKILLDuringWritesAndReads(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 99))
	c := StartCluster(t, 6)
	cl := c.Client()
	const size = 24 << 20
	type file struct {
		path, spec string
		seed       uint64
	}
	var files []file
	for round, spec := range []string{"ec:4+2,unit=256KiB", "mirror:3,unit=256KiB", "ec:3+2,unit=64KiB,visit=2"} {
		victims := rng.Perm(6)[:2] // up to two OSDs die: what ec:4+2 and mirror:3 tolerate
		f := file{fmt.Sprintf("/w%d", round), spec, rng.Uint64()}
		putSeeded(t, cl, f.path, f.spec, f.seed, size, size/3, func() {
			c.OSDs[victims[0]].Kill()
			c.OSDs[victims[1]].Kill()
		})
		files = append(files, f)
		// Read back with the victims still dead (degraded).
		checkSeeded(t, cl, f.path, f.seed, size, -1, nil)
		c.Restart(c.OSDs[victims[0]])
		c.Restart(c.OSDs[victims[1]])
		c.WaitUp(6)
	}
	// Kill OSDs during reads of every file.
	for _, f := range files {
		victims := rng.Perm(6)[:2]
		checkSeeded(t, cl, f.path, f.seed, size, size/2, func() {
			c.OSDs[victims[0]].Kill()
			c.OSDs[victims[1]].Kill()
		})
		c.Restart(c.OSDs[victims[0]])
		c.Restart(c.OSDs[victims[1]])
		c.WaitUp(6)
	}
	if t.Failed() {
		t.Log(c.Logs())
	}
}

// TestSIGKILLMDS kills the MDS after acknowledged writes; a restarted MDS
// serves them all.
func TestSIGKILLMDS(t *testing.T) {
	c := StartCluster(t, 6)
	cl := c.Client()
	for i := 0; i < 5; i++ {
		putSeeded(t, cl, fmt.Sprintf("/m%d", i), "ec:4+2,unit=64KiB", uint64(i), 1<<20+int64(i), -1, nil)
	}
	if err := cl.Mkdir(ctx, "/dir/sub", true); err != nil {
		t.Fatal(err)
	}
	c.MDS.Kill()
	c.Restart(c.MDS)
	c.WaitUp(6)
	for i := 0; i < 5; i++ {
		checkSeeded(t, cl, fmt.Sprintf("/m%d", i), uint64(i), 1<<20+int64(i), -1, nil)
	}
	if fi, err := cl.Stat(ctx, "/dir/sub"); err != nil || !fi.IsDir {
		t.Fatalf("directory after MDS SIGKILL: %+v %v", fi, err)
	}
}
