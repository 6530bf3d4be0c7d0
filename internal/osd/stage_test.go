package osd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/osdproto"
	"golang.org/x/sys/unix"

	"github.com/braidfs/braid/internal/wire"
)

func readAll(t *testing.T, s *Store, k ObjKey, ver uint64, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	if _, _, err := s.Read(k, ver, 0, buf); err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestStageApplyAbort(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	k := ObjKey{Ino: 3, Comp: 1}
	old := bytes.Repeat([]byte("o"), 10000)
	if _, err := s.Write(k, 1, 0, old, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	patch := bytes.Repeat([]byte("n"), 5000)
	if err := s.Stage(k, 1, 77, 3000, patch); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, k, 1, 10000); !bytes.Equal(got, old) {
		t.Fatal("staging changed the object")
	}
	if created, err := s.Apply(k, 1, 77, 0); err != nil || created {
		t.Fatalf("apply: created %v, %v", created, err)
	}
	want := append(append(append([]byte{}, old[:3000]...), patch...), old[8000:]...)
	if got := readAll(t, s, k, 1, 10000); !bytes.Equal(got, want) {
		t.Fatal("apply did not write the staged bytes")
	}
	if created, err := s.Apply(k, 1, 77, 0); err != nil || created {
		t.Fatalf("second apply: created %v, %v; want done (the tombstone says applied)", created, err)
	}
	// Abort drops a stage without touching the object.
	if err := s.Stage(k, 1, 78, 0, []byte("zzz")); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(k, 78); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 78, 0); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("apply after abort: %v, want ErrInvalid (aborted)", err)
	}
	if got := readAll(t, s, k, 1, 10000); !bytes.Equal(got, want) {
		t.Fatal("abort changed the object")
	}
	// A writer fenced by a newer layout cannot stage.
	if err := s.Sync(k, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(k, 1, 79, 0, []byte("x")); !errors.Is(err, wire.ErrStale) {
		t.Fatalf("stage under an old version: %v, want ErrStale", err)
	}
}

func TestDamagedStageRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	k := ObjKey{Ino: 4, Comp: 0}
	if err := s.Stage(k, 1, 5, 0, bytes.Repeat([]byte("d"), 8192)); err != nil {
		t.Fatal(err)
	}
	p := s.stagePath(k, 5)
	b, _ := os.ReadFile(p)
	b[stageHeaderBytes+100] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 5, 0); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("apply of a damaged stage: %v, want ErrCorrupt", err)
	}
	// Deleting the object removes its stages too.
	if _, err := s.Write(k, 1, 0, []byte("x"), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(k, 1); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "*.stg")); len(m) != 0 {
		t.Fatalf("stage files left after delete: %v", m)
	}
}

// The outcome of a staged write outlives its stage file (tombstones), so
// no answer is ambiguous: applying again is done, applying an aborted one
// is refused, a stage arriving after its outcome (a late copy) is refused,
// an abort of a stage never seen fences it, an apply of one never staged is
// not found. Tombstones survive a restart and are collected after
// tombstoneRetention, and with their object.
func TestStageTombstones(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	now := time.Now() // tombstones found at a restart are dated by the clock
	s.now = func() time.Time { return now }
	k := ObjKey{Ino: 9, Comp: 2}
	if _, err := s.Write(k, 1, 0, []byte("base"), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(k, 1, 1, 0, []byte("B")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(k, 1, 1, 0, []byte("late")); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("stage after its apply: %v, want ErrInvalid", err)
	}
	if err := s.Abort(k, 2); err != nil { // never staged here: fenced
		t.Fatal(err)
	}
	if err := s.Stage(k, 1, 2, 0, []byte("late")); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("stage after its abort: %v, want ErrInvalid", err)
	}
	if _, err := s.Apply(k, 1, 3, 0); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("apply of a stage never made: %v, want ErrNotFound", err)
	}
	if got := readAll(t, s, k, 1, 4); string(got) != "Base" {
		t.Fatalf("object reads %q, want %q", got, "Base")
	}
	// A restart keeps the outcomes.
	s = openTestStore(t, OSFS{}, dir)
	s.now = func() time.Time { return now }
	if _, err := s.Apply(k, 1, 1, 0); err != nil {
		t.Fatalf("apply again after a restart: %v", err)
	}
	if _, err := s.Apply(k, 1, 2, 0); !errors.Is(err, wire.ErrInvalid) {
		t.Fatalf("apply of an aborted stage after a restart: %v, want ErrInvalid", err)
	}
	// Collected a retention after they were made (or found at start).
	now = now.Add(tombstoneRetention + time.Second)
	if err := s.Abort(k, 4); err != nil { // a new tombstone collects the old
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 1, 0); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("apply long after: %v, want ErrNotFound (tombstone collected)", err)
	}
	if err := s.Delete(k, 1); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(s.stagePath(k, 4)), "*.ab*")); len(m) != 0 {
		t.Fatalf("tombstones left after delete: %v", m)
	}
}

// A stage of several segments (a writer's batch of stripes) leaves the
// object alone until applied, survives a restart, then writes every
// segment; applying again is done. A damaged segment table is corruption,
// never a partial apply.
func TestStageSegments(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	k := ObjKey{Ino: 4, Comp: 2}
	old := bytes.Repeat([]byte("o"), 40000)
	if _, err := s.Write(k, 1, 0, old, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	segs := []osdproto.Seg{{Off: 100, Len: 3000}, {Off: 8192, Len: 4096}, {Off: 39000, Len: 5000}}
	data := bytes.Repeat([]byte("abcdefg"), 12096/7+1)[:12096]
	if err := s.StageSegs(k, 1, 9, segs, data); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, k, 1, 40000); !bytes.Equal(got, old) {
		t.Fatal("staging changed the object")
	}
	s = openTestStore(t, OSFS{}, dir) // the stage outlives the process
	if _, err := s.Apply(k, 1, 9, 0); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, old...), make([]byte, 4000)...)
	at := 0
	for _, g := range segs {
		copy(want[g.Off:], data[at:at+int(g.Len)])
		at += int(g.Len)
	}
	if got := readAll(t, s, k, 1, len(want)); !bytes.Equal(got, want) {
		t.Fatal("apply did not write every segment where it belongs")
	}
	if _, err := s.Apply(k, 1, 9, 0); err != nil {
		t.Fatalf("second apply: %v, want done", err)
	}

	if err := s.StageSegs(k, 1, 10, segs, data); err != nil {
		t.Fatal(err)
	}
	path := s.stagePath(k, 10)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[stageHeaderBytes+4+12] ^= 0x40 // the second segment's offset
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 10, 0); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("apply of a stage with a damaged segment table: %v, want ErrCorrupt", err)
	}
	if got := readAll(t, s, k, 1, len(want)); !bytes.Equal(got, want) {
		t.Fatal("a damaged stage changed the object")
	}
}

// A stage's segments of zeros punch the object when applied: the range
// reads as zeros with valid checksums, the object keeps its length (a
// range past its end punches nothing there), the blocks wholly inside
// are given back to the disk, and the partial blocks at the ends keep
// their other bytes. A store on a file system that cannot punch holes
// writes the zeros instead.
func TestApplyPunchesZeroSegments(t *testing.T) {
	for _, fsys := range []FS{OSFS{}, noPunchFS{}} {
		t.Run(fmt.Sprintf("%T", fsys), func(t *testing.T) { applyPunches(t, fsys) })
	}
}

func applyPunches(t *testing.T, fsys FS) {
	dir := t.TempDir()
	s := openTestStore(t, fsys, dir)
	k := ObjKey{Ino: 4, Comp: 2}
	const size = 1 << 20
	old := make([]byte, size)
	for i := range old {
		old[i] = byte(i*7 + i/4096 + 1)
	}
	if _, err := s.Write(k, 1, 0, old, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	before := allocatedBytes(t, s.path(k, "dat"))
	segs := []osdproto.Seg{
		{Off: 100, Len: 50},                      // data
		{Off: 1000, Len: 600_000, Zero: true},    // partial blocks at both ends
		{Off: 700_000, Len: 3, Zero: true},       // inside one block
		{Off: 900_000, Len: 1 << 20, Zero: true}, // past the end
	}
	data := bytes.Repeat([]byte("d"), 50)
	if err := s.StageSegs(k, 1, 9, segs, data); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, fsys, dir) // the stage outlives the process
	if _, err := s.Apply(k, 1, 9, 0); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(old)
	copy(want[100:], data)
	clear(want[1000:601_000])
	clear(want[700_000:700_003])
	clear(want[900_000:])
	if n, _, err := s.Stat(k); err != nil || n != size {
		t.Fatalf("object length %d, %v after punching; want %d", n, err, size)
	}
	if got := readAll(t, s, k, 1, size); !bytes.Equal(got, want) {
		t.Fatal("the object does not read as the punched model")
	}
	// A stage of zeros alone has no data.
	if err := s.StageSegs(k, 1, 10, []osdproto.Seg{{Off: 0, Len: 10, Zero: true}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 10, 0); err != nil {
		t.Fatalf("apply of a stage of zeros alone: %v", err)
	}
	clear(want[:10])
	if got := readAll(t, s, k, 1, size); !bytes.Equal(got, want) {
		t.Fatal("a stage of zeros alone did not zero its range")
	}
	after := allocatedBytes(t, s.path(k, "dat"))
	freed := before - after
	t.Logf("%T: %d bytes allocated before, %d after", fsys, before, after)
	if _, ok := fsys.(noPunchFS); ok {
		return
	}
	if !canPunch(t, dir) {
		t.Logf("%s cannot punch holes: space is not checked", dir)
		return
	}
	// 146 whole blocks in the first range, 30 in the last.
	if freed < 170*blockBytes {
		t.Fatalf("punching freed %d bytes, want at least %d", freed, 170*blockBytes)
	}
	// Writing into a punched range again works like writing a hole.
	if _, err := s.Write(k, 1, 4096, []byte("again"), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	copy(want[4096:], "again")
	if got := readAll(t, s, k, 1, size); !bytes.Equal(got, want) {
		t.Fatal("a write into the punched range reads back wrong")
	}
}

func allocatedBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// canPunch says whether dir's file system punches holes.
func canPunch(t *testing.T, dir string) bool {
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<16)); err != nil {
		t.Fatal(err)
	}
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 1<<16) == nil
}

// noPunchFS is the real disk with files that cannot punch holes, and
// that answer io.EOF to a read of nothing at their end (as io.ReaderAt
// allows, and the simulation's disk does).
type noPunchFS struct{ OSFS }

func (n noPunchFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := n.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return strictFile{f}, nil
}

type strictFile struct{ File }

func (f strictFile) ReadAt(p []byte, off int64) (int, error) {
	if fi, err := f.Stat(); err == nil && off >= fi.Size() {
		return 0, io.EOF
	}
	return f.File.ReadAt(p, off)
}
