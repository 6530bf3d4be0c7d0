package simdisk

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"syscall"
	"testing"

	"github.com/braidfs/braid/internal/osd"
)

func mustOpen(t *testing.T, d *Disk, p string, flag int) interface {
	WriteAt([]byte, int64) (int, error)
	ReadAt([]byte, int64) (int, error)
	Sync() error
} {
	t.Helper()
	f, err := d.OpenFile(p, flag, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func contents(t *testing.T, d *Disk, p string) ([]byte, error) {
	t.Helper()
	f, err := d.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	fi, _ := f.Stat()
	b := make([]byte, fi.Size())
	_, _ = f.ReadAt(b, 0)
	return b, nil
}

// Bytes survive a crash once the file is fsynced; names once their
// directory is.
func TestCrashKeepsOnlyWhatWasSynced(t *testing.T) {
	d := New(0)
	if err := d.MkdirAll("/a", 0o755); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, d, "/a/durable", os.O_RDWR|os.O_CREATE)
	f.WriteAt([]byte("synced"), 0)
	f.Sync()
	dir := mustOpen(t, d, "/a", os.O_RDONLY)
	dir.Sync()
	f.WriteAt([]byte("SYNCED and more"), 0) // never synced
	g := mustOpen(t, d, "/a/unnamed", os.O_RDWR|os.O_CREATE)
	g.WriteAt([]byte("x"), 0)
	g.Sync() // bytes durable, name not
	d.Crash(nil)
	if b, err := contents(t, d, "/a/durable"); err != nil || string(b) != "synced" {
		t.Fatalf("after crash: %q %v", b, err)
	}
	if _, err := contents(t, d, "/a/unnamed"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a name never made durable survived the crash: %v", err)
	}
}

// A crash may keep a prefix of the unsynced writes, the last torn at a
// sector: every byte after it is the synced byte or one that was written.
func TestTornWritesKeepOnlyWrittenBytes(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		d := New(0)
		d.MkdirAll("/", 0o755)
		f := mustOpen(t, d, "/f", os.O_RDWR|os.O_CREATE)
		base := bytes.Repeat([]byte{'s'}, 8192)
		f.WriteAt(base, 0)
		f.Sync()
		mustOpen(t, d, "/", os.O_RDONLY).Sync()
		allowed := make([]map[byte]bool, 16384)
		for i := range allowed {
			allowed[i] = map[byte]bool{0: i >= len(base)}
			if i < len(base) {
				allowed[i]['s'] = true
			}
		}
		for w := 0; w < 5; w++ {
			off := rng.IntN(12000)
			b := bytes.Repeat([]byte{byte('a' + w)}, 1+rng.IntN(4000))
			f.WriteAt(b, int64(off))
			for i := range b {
				allowed[off+i][b[i]] = true
			}
		}
		d.Crash(rng)
		got, err := contents(t, d, "/f")
		if err != nil || len(got) < len(base) {
			t.Fatalf("seed %d: lost synced bytes: %d bytes, %v", seed, len(got), err)
		}
		for i, c := range got {
			if !allowed[i][c] {
				t.Fatalf("seed %d: byte %d is %q, never written there", seed, i, c)
			}
		}
	}
}

func TestFaultsCapacityLossAndBitFlips(t *testing.T) {
	d := New(100)
	d.MkdirAll("/", 0o755)
	f := mustOpen(t, d, "/f", os.O_RDWR|os.O_CREATE)
	if _, err := f.WriteAt(make([]byte, 101), 0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write past capacity: %v", err)
	}
	if _, err := f.WriteAt([]byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	if !d.FlipBit("/f", 1, 0) {
		t.Fatal("no byte to flip")
	}
	if b, _ := contents(t, d, "/f"); string(b) != "acc" {
		t.Fatalf("after a bit flip: %q", b)
	}
	d.Fault = func(op osd.FaultOp, p string) error {
		if op == osd.FaultSync {
			return syscall.EIO
		}
		return nil
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("injected EIO: %v", err)
	}
	if !d.LoseFile("/f") {
		t.Fatal("file to lose not found")
	}
	if _, err := contents(t, d, "/f"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("lost file still there: %v", err)
	}
}

// One seed tears the same writes of the same files every run.
func TestCrashReplaysFromItsSeed(t *testing.T) {
	image := func() string {
		d := New(0)
		d.MkdirAll("/d", 0o755)
		for i := 0; i < 20; i++ {
			f := mustOpen(t, d, "/d/f"+string(rune('a'+i)), os.O_RDWR|os.O_CREATE)
			for w := 0; w < 4; w++ {
				f.WriteAt(bytes.Repeat([]byte{byte('0' + w)}, 3000), int64(w*700))
			}
		}
		mustOpen(t, d, "/d", os.O_RDONLY).Sync()
		d.Crash(rand.New(rand.NewPCG(99, 1)))
		var out bytes.Buffer
		for _, p := range d.Files() {
			b, _ := contents(t, d, p)
			out.WriteString(p)
			out.Write(b)
		}
		return out.String()
	}
	if image() != image() {
		t.Fatal("the same seed crashed the disk into two different images")
	}
}

// A power cut of one machine's tree leaves the others' unsynced writes.
func TestCrashUnderLeavesOtherTrees(t *testing.T) {
	d := New(0)
	for _, p := range []string{"/m1/objects", "/m2"} {
		if err := d.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/m1/objects/o", "/m2/o"} {
		f := mustOpen(t, d, p, os.O_RDWR|os.O_CREATE)
		f.WriteAt([]byte("synced"), 0)
		f.Sync()
		dir := mustOpen(t, d, path.Dir(p), os.O_RDONLY)
		dir.Sync()
		f.WriteAt([]byte("SYNCED and more"), 0)
	}
	d.CrashUnder("/m1", nil)
	if b, err := contents(t, d, "/m1/objects/o"); err != nil || string(b) != "synced" {
		t.Fatalf("crashed tree: %q %v", b, err)
	}
	if b, err := contents(t, d, "/m2/o"); err != nil || string(b) != "SYNCED and more" {
		t.Fatalf("other tree: %q %v", b, err)
	}
	if _, free, _ := d.Statfs("/"); free != 1<<50-int64(len("synced")+len("SYNCED and more")) {
		t.Fatalf("free after the crash: %d", free)
	}
}
