package osd

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/osdproto"

	"github.com/braidfs/braid/internal/wire"
)

func noFatal(t *testing.T) func(error) {
	return func(err error) { t.Errorf("fatal: %v", err) }
}

// openTestStore opens a store whose new objects are files of their own
// (the file store's format is what these tests look at).
func openTestStore(t *testing.T, fsys FS, dir string) *Store {
	t.Helper()
	s := openPackedStore(t, fsys, dir)
	s.SetPacking(false)
	return s
}

// openPackedStore opens a store as an OSD does: small objects packed.
func openPackedStore(t *testing.T, fsys FS, dir string) *Store {
	t.Helper()
	s, err := OpenStore(fsys, dir, noFatal(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestModel writes random extents and compares reads with an in-memory
// model: small ones through the page cache, and large ones at every
// alignment of offset and buffer address, whose aligned middles are written
// directly (direct.go) while heads and tails stay buffered.
func TestModel(t *testing.T) {
	t.Run("small", func(t *testing.T) { runModel(t, 200_000, 20_000, false) })
	// Packed: objects grow past packMaxBytes and move to files, or stay.
	t.Run("packed/moved", func(t *testing.T) { runModelOn(t, 100_000, 20_000, false, true) })
	t.Run("packed", func(t *testing.T) { runModelOn(t, 40_000, 10_000, false, true) })
	t.Run("large/write-cache", func(t *testing.T) {
		if s := runModel(t, 6<<20, 3<<20, true); s.directBytes.Load() != 0 {
			t.Fatalf("%d bytes written directly with the write cache on", s.directBytes.Load())
		}
	})
	t.Run("large", func(t *testing.T) {
		s := runModel(t, 6<<20, 3<<20, false)
		if dir := t.TempDir(); directUseful(dir) {
			if s.directBytes.Load() == 0 {
				t.Fatal("no write took the direct path")
			}
		} else if s.directBytes.Load() != 0 {
			t.Fatalf("%d bytes written directly where O_DIRECT is refused or emulated, want none", s.directBytes.Load())
		}
	})
}

// runModel runs random writes, truncates and reads of up to maxLen bytes
// below maxOff against a model, then checks the object after reopening.
// writeCache is the store's Config.WriteCache. It returns the store as it
// was before reopening.
func runModel(t *testing.T, maxOff int64, maxLen int, writeCache bool) *Store {
	return runModelOn(t, maxOff, maxLen, writeCache, false)
}

// runModelOn is runModel on a store that packs small objects or not.
func runModelOn(t *testing.T, maxOff int64, maxLen int, writeCache, packed bool) *Store {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	open := openTestStore
	if packed {
		open = openPackedStore
	}
	s := open(t, OSFS{}, dir)
	s.direct = s.direct && !writeCache
	k := ObjKey{Ino: 9, Comp: 2}
	var model []byte
	// Writes take slices of one page-aligned buffer at a random shift, so
	// buffer addresses are aligned with their file offsets or not.
	backing := make([]byte, maxLen+2*directAlign)
	for step := 0; step < 300; step++ {
		off := rng.Int64N(maxOff)
		if rng.IntN(2) == 0 {
			off &^= directAlign - 1
		}
		n := rng.IntN(maxLen) + 1
		switch rng.IntN(6) {
		case 0:
			size := rng.Int64N(maxOff + int64(maxLen)/2)
			if _, err := s.Truncate(k, 1, size, 0); err != nil {
				t.Fatalf("seed %d step %d: truncate: %v", seed, step, err)
			}
			model = resize(model, size)
		case 1, 2, 3:
			shift := int(off % directAlign)
			if rng.IntN(3) == 0 {
				shift = rng.IntN(directAlign)
			}
			p := backing[shift : shift+n]
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			if _, err := s.Write(k, 1, off, p, 0); err != nil {
				t.Fatalf("seed %d step %d: write: %v", seed, step, err)
			}
			model = resize(model, max(int64(len(model)), off+int64(n)))
			copy(model[off:], p)
		default:
			buf := make([]byte, n)
			size, _, err := s.Read(k, 1, off, buf)
			if err != nil {
				t.Fatalf("seed %d step %d: read: %v", seed, step, err)
			}
			want := make([]byte, n)
			if off < int64(len(model)) {
				copy(want, model[off:])
			}
			if size != int64(len(model)) || !bytes.Equal(buf, want) {
				t.Fatalf("seed %d step %d: read %d@%d differs (size %d, model %d)", seed, step, n, off, size, len(model))
			}
		}
	}
	// Everything survives reopening from disk.
	s.Close()
	s2 := open(t, OSFS{}, dir)
	buf := make([]byte, len(model))
	if _, _, err := s2.Read(k, 1, 0, buf); err != nil || !bytes.Equal(buf, model) {
		t.Fatalf("seed %d: after reopen: %v", seed, err)
	}
	if s2.UsedBytes() != int64(len(model)) {
		t.Fatalf("used %d after reopen, want %d", s2.UsedBytes(), len(model))
	}
	return s
}

func resize(b []byte, n int64) []byte {
	if n <= int64(len(b)) {
		return b[:n]
	}
	return append(b, make([]byte, n-int64(len(b)))...)
}

func TestCorruptionDetected(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	k := ObjKey{Ino: 1, Comp: 0}
	data := bytes.Repeat([]byte("braid"), 5000)
	if _, err := s.Write(k, 1, 0, data, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := s.path(k, "dat")
	raw, _ := os.ReadFile(path)
	raw[10000] ^= 0x40
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := openTestStore(t, OSFS{}, dir)
	buf := make([]byte, len(data))
	if _, _, err := s2.Read(k, 1, 0, buf); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("read of flipped byte: err %v, want ErrCorrupt", err)
	}
	// Blocks away from the damage still read.
	if _, _, err := s2.Read(k, 1, 16384, buf[:4096]); err != nil || !bytes.Equal(buf[:4096], data[16384:16384+4096]) {
		t.Fatalf("undamaged block: %v", err)
	}
	// A damaged checksum header loses the object as a whole (a repair worker
	// replaces it; no block of it can be vouched for).
	s2.Close()
	sum, _ := os.ReadFile(s.path(k, "sum"))
	sum[8] ^= 1
	_ = os.WriteFile(s.path(k, "sum"), sum, 0o644)
	s3 := openTestStore(t, OSFS{}, dir)
	if _, _, err := s3.Read(k, 1, 0, buf); !errors.Is(err, wire.ErrLost) {
		t.Fatalf("damaged header: err %v, want ErrLost", err)
	}
}

func TestStaleVersion(t *testing.T) {
	s := openTestStore(t, OSFS{}, t.TempDir())
	k := ObjKey{Ino: 3, Comp: 1}
	if _, err := s.Write(k, 5, 0, []byte("v5"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(k, 4, 0, []byte("v4"), 0); !errors.Is(err, wire.ErrStale) {
		t.Fatalf("write at older version: %v", err)
	}
	if _, _, err := s.Read(k, 4, 0, make([]byte, 2)); !errors.Is(err, wire.ErrStale) {
		t.Fatalf("read at older version: %v", err)
	}
	if _, err := s.Write(k, 6, 0, []byte("v6"), 0); err != nil {
		t.Fatal(err)
	}
	if _, v, _ := s.Stat(k); v != 6 {
		t.Fatalf("version %d after newer write, want 6", v)
	}
}

func TestFullDisk(t *testing.T) {
	dir := t.TempDir()
	lfs := NewLimitFS(OSFS{}, 300_000, 0)
	s := openTestStore(t, lfs, dir)
	keep := bytes.Repeat([]byte{7}, 100_000)
	if _, err := s.Write(ObjKey{Ino: 1}, 1, 0, keep, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	_, err := s.Write(ObjKey{Ino: 2}, 1, 0, make([]byte, 400_000), 0)
	if !errors.Is(err, wire.ErrNoSpace) {
		t.Fatalf("write past capacity: %v, want ErrNoSpace", err)
	}
	buf := make([]byte, len(keep))
	if _, _, err := s.Read(ObjKey{Ino: 1}, 1, 0, buf); err != nil || !bytes.Equal(buf, keep) {
		t.Fatalf("other object damaged by full disk: %v", err)
	}
	if err := s.Delete(ObjKey{Ino: 1}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ObjKey{Ino: 2}, 1, 0, make([]byte, 250_000), 0); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
}

func TestMissingObjectReadsZero(t *testing.T) {
	s := openTestStore(t, OSFS{}, t.TempDir())
	buf := []byte("xxxx")
	size, _, err := s.Read(ObjKey{Ino: 77}, 1, 100, buf)
	if err != nil || size != 0 || !bytes.Equal(buf, make([]byte, 4)) {
		t.Fatalf("missing object: %q %d %v", buf, size, err)
	}
}

func TestParseObjectName(t *testing.T) {
	k, ok := ParseObjectName("00000000000000ff.3.dat")
	if !ok || k != (ObjKey{Ino: 255, Comp: 3}) {
		t.Fatalf("got %+v %v", k, ok)
	}
	for _, bad := range []string{"x.dat", "ff.3.sum", "ff.-1.dat", "zz.1.dat"} {
		if _, ok := ParseObjectName(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestDeleteRespectsNewerLayout(t *testing.T) {
	s := openTestStore(t, OSFS{}, t.TempDir())
	k := ObjKey{Ino: 5, Comp: 0}
	if _, err := s.Write(k, 2, 0, []byte("new layout data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(k, 1); !errors.Is(err, wire.ErrStale) {
		t.Fatalf("delete of the old layout's object removed the new layout's: %v", err)
	}
	buf := make([]byte, 15)
	if _, _, err := s.Read(k, 2, 0, buf); err != nil || string(buf) != "new layout data" {
		t.Fatalf("after refused delete: %q %v", buf, err)
	}
	if err := s.Delete(k, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(k, 2); err != nil { // a retried delete is harmless
		t.Fatal(err)
	}
	if size, _, _ := s.Read(k, 2, 0, buf); size != 0 || s.UsedBytes() != 0 {
		t.Fatalf("after delete: size %d, used %d", size, s.UsedBytes())
	}
}

// noDirectFS is the real disk with O_DIRECT refused, as on a file system
// that does not take it.
type noDirectFS struct{ OSFS }

func (noDirectFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &osFile{File: f, noDirect: true}, nil
}

// TestCapacityCountsLargeWritesOnce: a capacity-limited OSD counts a large
// write once whether it goes direct, falls back to buffered because the
// file system refuses O_DIRECT, or is buffered by --write-cache.
func TestCapacityCountsLargeWritesOnce(t *testing.T) {
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i)
	}
	used := func(fsys FS, writeCache bool) int64 {
		lfs := NewLimitFS(fsys, 1<<30, 0)
		s := openTestStore(t, lfs, t.TempDir())
		s.direct = s.direct && !writeCache
		for i := 0; i < 4; i++ {
			if _, err := s.Write(ObjKey{Ino: 1}, 1, int64(i)*int64(len(data)), data, 0); err != nil {
				t.Fatal(err)
			}
		}
		total, avail, _ := lfs.Statfs("")
		return total - avail
	}
	buffered := used(OSFS{}, true)
	if buffered < 4*int64(len(data)) {
		t.Fatalf("buffered writes count %d bytes, want at least %d", buffered, 4*len(data))
	}
	if got := used(noDirectFS{}, false); got != buffered {
		t.Fatalf("with O_DIRECT refused: %d bytes counted, buffered writes count %d", got, buffered)
	}
	if got := used(OSFS{}, false); got != buffered {
		t.Fatalf("direct writes: %d bytes counted, buffered writes count %d", got, buffered)
	}
}

// An object file deleted from under a running OSD was served from its
// open descriptor until the OSD restarted: nothing noticed the loss. An
// idle object's files are checked again (at most every revalidateAfter),
// and one removed from disk reads as the missing object it is.
func TestObjectDeletedFromUnderTheStoreIsMissing(t *testing.T) {
	s := openTestStore(t, OSFS{}, t.TempDir())
	k := ObjKey{Ino: 5, Comp: 1}
	data := bytes.Repeat([]byte("gone "), 2000)
	if _, err := s.Write(k, 1, 0, data, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data))
	if size, _, err := s.Read(k, 1, 0, buf); err != nil || size != int64(len(data)) {
		t.Fatalf("read before: %d %v", size, err)
	}
	for _, ext := range []string{"dat", "sum"} {
		if err := os.Remove(s.path(k, ext)); err != nil {
			t.Fatal(err)
		}
	}
	// Within revalidateAfter the open descriptor is still trusted; past
	// it, the removal is noticed (the store's clock, moved by the test).
	now := time.Now()
	s.now = func() time.Time { return now }
	if size, _, err := s.Read(k, 1, 0, buf); err != nil {
		t.Fatalf("read within the revalidation interval: %d %v", size, err)
	}
	now = now.Add(revalidateAfter)
	if size, _, err := s.Read(k, 1, 0, buf); err != nil || size != 0 {
		t.Fatalf("an object deleted from disk still reads: size %d, err %v", size, err)
	}
}

// A data map names the units that hold data, not the holes of a sparse
// object; written zeros count, punched ranges do not.
func TestDataMapSkipsHoles(t *testing.T) {
	s := openTestStore(t, OSFS{}, t.TempDir())
	k := ObjKey{Ino: 9, Comp: 0}
	const unit = 1 << 20
	for _, at := range []int64{0, 10 * unit, 40*unit + 5000} {
		if _, err := s.Write(k, 1, at, bytes.Repeat([]byte{7}, 3000), osdproto.FlagSync); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Write(k, 1, 20*unit, make([]byte, 8192), osdproto.FlagSync); err != nil { // zeros written
		t.Fatal(err)
	}
	bits, size, _, err := s.DataMap(k, 1, 0, unit, osdproto.MaxDataMapUnits)
	if err != nil {
		t.Fatal(err)
	}
	if size != 40*unit+8000 {
		t.Fatalf("size %d", size)
	}
	var got []int
	for i := 0; i < len(bits)*8; i++ {
		if bits[i/8]&(1<<(i%8)) != 0 {
			got = append(got, i)
		}
	}
	if fmt.Sprint(got) != "[0 10 20 40]" {
		t.Fatalf("data in units %v; want [0 10 20 40]", got)
	}
	// Paged from an offset, and a missing object maps nothing.
	bits, _, _, err = s.DataMap(k, 1, 10*unit, unit, 2)
	if err != nil || len(bits) != 1 || bits[0] != 1 {
		t.Fatalf("two units from unit 10: %08b %v", bits, err)
	}
	if bits, size, _, err := s.DataMap(ObjKey{Ino: 99}, 1, 0, unit, 8); err != nil || size != 0 || len(bits) != 0 {
		t.Fatalf("missing object: %v %d %v", bits, size, err)
	}
	if _, _, _, err := s.DataMap(k, 1, 0, 1000, 8); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("a unit not of whole blocks: %v", err)
	}
}

// FuzzPackSegment: whatever a segment file holds, reading it neither
// panics nor returns a record that does not check, and a record written
// by the store reads back as written.
func FuzzPackSegment(f *testing.F) {
	const salt = 0x5a17
	img := (&image{version: 3, sums: []uint32{1}, data: []byte("data")}).encode()
	f.Add(encodeRecord(salt, recHeader{kind: recImage, key: ObjKey{Ino: 1}, birth: 1}, img))
	f.Add(append(encodeRecord(salt, recHeader{kind: recLabel, key: ObjKey{Ino: 2, Comp: 1}, birth: 2}, []byte("label")),
		encodeRecord(salt, recHeader{kind: recDelete, key: ObjKey{Ino: 2}, birth: 2, killed: 7}, nil)...))
	f.Add([]byte("BPK1 not a record"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, end := scanSegment(salt, b)
		if end > int64(len(b)) || end%recAlign != 0 && end != 0 {
			t.Fatalf("end %d of %d bytes", end, len(b))
		}
		for _, r := range recs {
			if r.damaged {
				continue
			}
			if _, n, ok := recordAt(salt, b, r.off); !ok || r.off+n > end {
				t.Fatalf("record at %d does not check, or lies past the end %d", r.off, end)
			}
			if r.h.kind == recImage {
				im, err := decodeImage(r.body)
				if err != nil {
					t.Fatal(err)
				}
				if got := (im).encode(); string(got) != string(r.body) {
					t.Fatal("image does not encode back to its body")
				}
			}
		}
	})
}

// A store written before the pack has its small objects moved in, with
// their checksums, holes and labels; large ones stay files; files a move
// left behind are removed.
func TestMigrateMovesSmallObjectsIntoThePack(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	small, large := ObjKey{Ino: 1}, ObjKey{Ino: 2}
	data := bytes.Repeat([]byte("small"), 3000)
	if _, err := s.Write(small, 4, 8192, data, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLabel(small, 4, []byte("the label")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(large, 1, 0, make([]byte, 200<<10), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openPackedStore(t, OSFS{}, dir)
	moved, more, err := s.Migrate(100)
	if err != nil || moved != 1 || more {
		t.Fatalf("migrate: moved %d, more %v, %v", moved, more, err)
	}
	s.Close()
	s = openPackedStore(t, OSFS{}, dir)
	if _, err := os.Stat(s.path(small, "dat")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the moved object's files remain: %v", err)
	}
	if !s.packed(small) || s.packed(large) {
		t.Fatalf("packed: small %v, large %v", s.packed(small), s.packed(large))
	}
	buf := make([]byte, 8192+len(data))
	if n, v, err := s.Read(small, 4, 0, buf); err != nil || n != int64(len(buf)) || v != 4 || !bytes.Equal(buf[8192:], data) || !osdproto.AllZero(buf[:8192]) {
		t.Fatalf("moved object reads %d bytes at version %d: %v", n, v, err)
	}
	bits, _, _, err := s.DataMap(small, 4, 0, 4096, 16)
	if err != nil || bits[0] != 0b11111100&((1<<((8192+len(data)+4095)/4096))-1) {
		t.Fatalf("data map %08b (%v): the two holes and the data blocks", bits, err)
	}
	entries, _, err := s.ScanLabels("", 10)
	if err != nil || len(entries) != 2 || string(entries[0].Label) != "the label" {
		t.Fatalf("labels after the move: %+v (%v)", entries, err)
	}
	if s.UsedBytes() != int64(len(buf))+200<<10 {
		t.Fatalf("used %d", s.UsedBytes())
	}
	// A move a crash cut short after the pack took the object: the files
	// are leftovers, removed before the store serves (a delete of the
	// object must not bring them back).
	if err := os.WriteFile(s.path(small, "dat"), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openPackedStore(t, OSFS{}, dir)
	if _, err := os.Stat(s.path(small, "dat")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover files remain: %v", err)
	}
	if err := s.Delete(small, 4); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.Stat(small); n != 0 || err != nil {
		t.Fatalf("deleted object: %d bytes (%v)", n, err)
	}
}

// A packed record whose bytes rot reads as corrupt, never as data; after
// a restart the object is missing (rebuilt from its redundancy), never
// an older image of it, and stays so.
func TestPackedDamageIsCorruptThenMissing(t *testing.T) {
	dir := t.TempDir()
	s := openPackedStore(t, OSFS{}, dir)
	k, other := ObjKey{Ino: 1}, ObjKey{Ino: 2}
	for i, p := range [][]byte{[]byte("first version"), []byte("second version")} {
		if _, err := s.Write(k, 1, 0, p, osdproto.FlagSync); err != nil {
			t.Fatal(err, i)
		}
	}
	if _, err := s.Write(other, 1, 0, []byte("other"), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	e, _ := s.pack.lookup(k)
	seg := filepath.Join(dir, "pack", segName(e.img.seg, s.pack.segs[e.img.seg].salt))
	raw, _ := os.ReadFile(seg)
	raw[e.img.off+recHeaderBytes+20] ^= 1
	if err := os.WriteFile(seg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 14)
	if _, _, err := s.Read(k, 1, 0, buf); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("read of a rotten record: %v, want ErrCorrupt", err)
	}
	for range 2 {
		s.Close()
		s = openPackedStore(t, OSFS{}, dir)
		if n, _, err := s.Read(k, 1, 0, buf); err != nil || n != 0 {
			t.Fatalf("after a restart the damaged object reads %d bytes %q (%v), want missing", n, buf[:n], err)
		}
		if n, _, err := s.Read(other, 1, 0, buf[:5]); err != nil || n != 5 || string(buf[:5]) != "other" {
			t.Fatalf("another object: %d bytes %q (%v)", n, buf[:5], err)
		}
	}
}

// A write a power cut tore after the last fsync (its header and trailer
// reached the disk, a page between them did not) is not taken for rot:
// the object keeps its synced image, it is not made missing.
func TestTornUnsyncedWriteKeepsTheSyncedImage(t *testing.T) {
	dir := t.TempDir()
	s := openPackedStore(t, OSFS{}, dir)
	k := ObjKey{Ino: 1}
	synced := bytes.Repeat([]byte("v1"), 6000)
	if _, err := s.Write(k, 1, 0, synced, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(k, 1, 0, bytes.Repeat([]byte("v2"), 6000), 0); err != nil {
		t.Fatal(err)
	}
	e, _ := s.pack.lookup(k)
	seg := filepath.Join(dir, "pack", segName(e.img.seg, s.pack.segs[e.img.seg].salt))
	s.Close()
	raw, _ := os.ReadFile(seg)
	clear(raw[e.img.off+4096 : e.img.off+8192]) // a page of the unsynced image never written
	if err := os.WriteFile(seg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	s = openPackedStore(t, OSFS{}, dir)
	buf := make([]byte, len(synced))
	if n, _, err := s.Read(k, 1, 0, buf); err != nil || n != int64(len(synced)) || !bytes.Equal(buf, synced) {
		t.Fatalf("after a torn unsynced write: %d bytes (%v), want the synced image", n, err)
	}
}

// An object whose record rots while the store runs, and whose segment is
// then compacted, reads as lost, never as zeros, and takes a new write
// (its rebuild).
func TestRotCompactedAwayIsLostNotZeros(t *testing.T) {
	dir := t.TempDir()
	s := openPackedStore(t, OSFS{}, dir)
	s.pack.segBytes = 16 << 10
	k, dead := ObjKey{Ino: 1}, ObjKey{Ino: 2}
	if _, err := s.Write(dead, 1, 0, make([]byte, 10000), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(k, 1, 0, bytes.Repeat([]byte("k"), 3000), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(dead, 1); err != nil {
		t.Fatal(err)
	}
	e, _ := s.pack.lookup(k)
	for i := range 6 { // fill and seal segments; the others die, so k's segment is mostly dead
		o := ObjKey{Ino: 100 + uint64(i)}
		if _, err := s.Write(o, 1, 0, make([]byte, 10000), osdproto.FlagSync); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(o, 1); err != nil {
			t.Fatal(err)
		}
	}
	sg := s.pack.segs[e.img.seg]
	var b [1]byte
	if _, err := sg.f.ReadAt(b[:], e.img.off+recHeaderBytes+100); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if _, err := sg.f.WriteAt(b[:], e.img.off+recHeaderBytes+100); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if did, err := s.Compact(); err != nil {
			t.Fatal(err)
		} else if !did {
			break
		}
	}
	if _, ok := s.pack.segs[e.img.seg]; ok {
		t.Fatal("the damaged record's segment was not compacted")
	}
	buf := make([]byte, 10)
	if n, _, err := s.Read(k, 1, 0, buf); err == nil && n > 0 {
		t.Fatalf("a damaged, compacted object reads %d bytes %q", n, buf)
	}
	if _, err := s.Write(k, 2, 0, []byte("rebuilt"), osdproto.FlagSync); err != nil {
		t.Fatalf("rebuilding it: %v", err)
	}
	if n, _, err := s.Read(k, 2, 0, buf[:7]); err != nil || n != 7 || string(buf[:7]) != "rebuilt" {
		t.Fatalf("rebuilt object: %d %q %v", n, buf[:7], err)
	}
}

// Writes of one object's units arrive side by side (a client sends its
// stripes in parallel): the one that takes the object past the pack's
// limit moves it to files while the others wait for it, and every byte
// lands.
func TestParallelWritesAcrossThePackLimit(t *testing.T) {
	s := openPackedStore(t, OSFS{}, t.TempDir())
	const units, unit = 6, 64 << 10
	for trial := range 40 {
		k := ObjKey{Ino: uint64(trial + 1)}
		want := make([]byte, units*unit)
		for i := range want {
			want[i] = byte(i*7 + trial)
		}
		var wg sync.WaitGroup
		for u := range units {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Write(k, 1, int64(u*unit), want[u*unit:(u+1)*unit], osdproto.FlagSync); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		got := make([]byte, len(want))
		if n, _, err := s.Read(k, 1, 0, got); err != nil || n != int64(len(want)) || !bytes.Equal(got, want) {
			t.Fatalf("trial %d: %d bytes (%v), differ: %v", trial, n, err, !bytes.Equal(got, want))
		}
	}
}

// A request that comes in while a promotion has taken the object out of
// the pack and not yet onto its files gets the same object, held by the
// promotion, not a second one opened beside it (two objects of one key
// each wrote its own view: the e2e tests read back wrong bytes).
func TestObjectLeavingThePackIsNotOpenedTwice(t *testing.T) {
	s := openPackedStore(t, OSFS{}, t.TempDir())
	k := ObjKey{Ino: 1}
	if _, err := s.Write(k, 1, 0, []byte("packed"), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	held, err := s.acquire(k, false, 0)
	if err != nil || held == nil || !held.stored.Load() {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := s.pack.remove(k); err != nil { // as promote, between its delete and its files
		t.Fatal(err)
	}
	s.mu.Lock()
	held.checked = time.Time{}
	s.mu.Unlock()
	again, err := s.acquire(k, false, 0)
	if err != nil || again != held {
		t.Fatalf("a second request got another object (%p, held %p): %v", again, held, err)
	}
	s.release(again)
	s.release(held)
}
