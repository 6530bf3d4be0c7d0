package fusefs_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// fallocate(2) as databases, VM images and download tools use it: plain
// allocation grows the file (reading zeros), FALLOC_FL_KEEP_SIZE keeps
// the size, punching a hole and zeroing a range read back as zeros, and
// what braid cannot do (collapse, insert) is refused clearly. Each step
// is checked against a model of the file's bytes, and again after the
// file is closed and opened anew.
func TestFallocate(t *testing.T) {
	_, m := mountCluster(t, 6)
	p := filepath.Join(m, "f")
	model := make([]byte, 300<<10)
	for i := range model {
		model[i] = byte(rand.IntN(255) + 1)
	}
	if err := os.WriteFile(p, model, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	check := func(what string) {
		t.Helper()
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: read: %v", what, err)
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("%s: %d bytes read, want %d as the model", what, len(got), len(model))
		}
		st, err := f.Stat()
		if err != nil || st.Size() != int64(len(model)) {
			t.Fatalf("%s: fstat size %d (%v), want %d", what, st.Size(), err, len(model))
		}
	}
	zero := func(off, n int) {
		for i := off; i < off+n && i < len(model); i++ {
			model[i] = 0
		}
	}
	grow := func(end int) {
		if end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
	}
	fd := int(f.Fd())
	steps := []struct {
		what      string
		mode      uint32
		off, n    int
		apply     func(off, n int)
		wantErrno syscall.Errno
	}{
		{"allocate past the end", 0, 200 << 10, 1 << 20, func(off, n int) { grow(off + n) }, 0},
		{"allocate inside", 0, 0, 4096, func(int, int) {}, 0},
		{"keep size", unix.FALLOC_FL_KEEP_SIZE, 1 << 20, 4 << 20, func(int, int) {}, 0},
		{"punch a hole", unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, 10_000, 50_000, zero, 0},
		{"punch past the end", unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, 1_200_000, 100_000, zero, 0},
		{"zero a range", unix.FALLOC_FL_ZERO_RANGE, 100_000, 70_000, zero, 0},
		{"zero past the end", unix.FALLOC_FL_ZERO_RANGE, 1_200_000, 200_000, func(off, n int) { zero(off, n); grow(off + n) }, 0},
		{"zero, keep size", unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE, 1_350_000, 200_000, zero, 0},
		{"punch without keep size", unix.FALLOC_FL_PUNCH_HOLE, 0, 4096, nil, syscall.EOPNOTSUPP},
		{"collapse", unix.FALLOC_FL_COLLAPSE_RANGE, 0, 64 << 10, nil, syscall.EOPNOTSUPP},
		{"insert", unix.FALLOC_FL_INSERT_RANGE, 0, 64 << 10, nil, syscall.EOPNOTSUPP},
	}
	for _, s := range steps {
		err := unix.Fallocate(fd, s.mode, int64(s.off), int64(s.n))
		if s.wantErrno != 0 {
			wantErrno(t, s.what, err, s.wantErrno)
			check(s.what + " (refused)")
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		s.apply(s.off, s.n)
		check(s.what)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, model) {
		t.Fatalf("after close: %d bytes (%v), want the model's %d", len(got), err, len(model))
	}
	ro, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	wantErrno(t, "fallocate on a read-only descriptor", unix.Fallocate(int(ro.Fd()), 0, 0, 1), syscall.EBADF)
}
