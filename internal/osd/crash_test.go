package osd_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/braidfs/braid/internal/osdproto"

	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/simdisk"
	"github.com/braidfs/braid/internal/wire"
)

// crashModel is what one object may hold after a crash, byte by byte.
type crashModel struct {
	durable []byte    // as of the last acknowledged sync
	synced  bool      // a sync was acknowledged: the object must exist
	allowed []byteSet // per byte: durable value or anything written since
	dirty   []bool    // per byte: written since the last sync
}

func (m *crashModel) write(off int, p []byte) {
	for len(m.allowed) < off+len(p) {
		m.allowed = append(m.allowed, byteSet{}.with(0))
		m.dirty = append(m.dirty, false)
	}
	for i, c := range p {
		m.allowed[off+i] = m.allowed[off+i].with(c)
		m.dirty[off+i] = true
	}
}

func (m *crashModel) sync(current []byte) {
	m.durable = append(m.durable[:0], current...)
	m.synced = true
	for i := range m.allowed {
		m.allowed[i] = byteSet{}.with(0)
		if i < len(current) {
			m.allowed[i] = byteSet{}.with(current[i])
		}
		m.dirty[i] = false
	}
}

// The store on a disk that loses power: after a crash at a seeded moment,
// with some unsynced writes torn onto the disk, every block reads as bytes
// that were written there, or fails its checksum (never other bytes); what
// an acknowledged sync covered and nothing touched since reads back
// exactly. Each failure names its seed; BRAID_SEED=N replays it,
// BRAID_SEEDS=N runs N seeds (100 by default).
func TestCrashNeverReadsUnwrittenBytes(t *testing.T) {
	// Packed objects (the pack's log); objects that grow out of the pack
	// into files; and a pack of tiny segments that roll and compact
	// between writes.
	t.Run("packed", func(t *testing.T) { crashRun(t, 64<<10, 0, false) })
	t.Run("moved", func(t *testing.T) { crashRun(t, 100<<10, 0, false) })
	t.Run("compacted", func(t *testing.T) { crashRun(t, 32<<10, 16<<10, true) })
}

// crashRun runs the crash model over objects of up to objBytes, with pack
// segments of segBytes (0: the default), compacting between steps if
// compact is set.
func crashRun(t *testing.T, objBytes int, segBytes int64, compact bool) {
	const objects, block = 4, 4096
	seeds := uint64(100)
	if n, err := strconv.ParseUint(os.Getenv("BRAID_SEEDS"), 10, 64); err == nil && n > 0 {
		seeds = n // make sim SEEDS=N
	}
	first := uint64(1)
	if n, err := strconv.ParseUint(os.Getenv("BRAID_SEED"), 10, 64); err == nil && n > 0 {
		first, seeds = n, 1 // replay one seed
	}
	for seed := first; seed < first+seeds; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		disk := simdisk.New(0)
		fatal := func(err error) { t.Errorf("seed %d: fatal: %v", seed, err) }
		s, err := osd.OpenStore(disk, "/osd", fatal)
		if err != nil {
			t.Fatal(err)
		}
		if segBytes > 0 {
			osd.SetPackSegmentBytes(s, segBytes)
		}

		models := make([]crashModel, objects)
		current := make([][]byte, objects)
		for op := 0; op < 40; op++ {
			if compact && rng.IntN(3) == 0 {
				if _, err := s.Compact(); err != nil {
					t.Fatalf("seed %d: compact: %v", seed, err)
				}
			}
			o := rng.IntN(objects)
			k := osd.ObjKey{Ino: 1, Comp: uint32(o)}
			if rng.IntN(4) == 0 {
				if err := s.Sync(k, 1); err != nil {
					t.Fatalf("seed %d: sync: %v", seed, err)
				}
				if current[o] != nil {
					models[o].sync(current[o])
				}
				continue
			}
			off := rng.IntN(objBytes - 1)
			p := make([]byte, 1+rng.IntN(min(objBytes-off, 3*block)))
			for i := range p {
				p[i] = byte(1 + rng.IntN(255))
			}
			if _, err := s.Write(k, 1, int64(off), p, 0); err != nil {
				t.Fatalf("seed %d: write: %v", seed, err)
			}
			current[o] = grow(current[o], off+len(p))
			copy(current[o][off:], p)
			models[o].write(off, p)
		}
		s.Close()
		disk.Crash(rng)
		s, err = osd.OpenStore(disk, "/osd", fatal)
		if err != nil {
			t.Fatalf("seed %d: reopen after crash: %v", seed, err)
		}
		for o := range models {
			if err := checkCrashed(s, o, &models[o], block); err != nil {
				t.Fatalf("seed %d: object %d: %v", seed, o, err)
			}
		}
	}
}

// byteSet is a set of byte values.
type byteSet [4]uint64

func (s byteSet) with(c byte) byteSet { s[c/64] |= 1 << (c % 64); return s }
func (s byteSet) has(c byte) bool     { return s[c/64]&(1<<(c%64)) != 0 }

func grow(b []byte, n int) []byte {
	for len(b) < n {
		b = append(b, 0)
	}
	return b
}

func checkCrashed(s *osd.Store, o int, m *crashModel, block int) error {
	k := osd.ObjKey{Ino: 1, Comp: uint32(o)}
	for b := 0; b*block < len(m.allowed); b++ {
		buf := make([]byte, block)
		size, _, err := s.Read(k, 1, int64(b*block), buf)
		end := min(len(m.allowed), (b+1)*block)
		touched := false
		for i := b * block; i < end; i++ {
			touched = touched || m.dirty[i]
		}
		switch {
		case errors.Is(err, wire.ErrCorrupt) && touched, errors.Is(err, wire.ErrLost) && !m.synced:
			continue // a torn block (or a never-synced object's header) caught by its checksum
		case err != nil:
			return fmt.Errorf("block %d: %v (written since the last sync: %v)", b, err, touched)
		case m.synced && size < int64(len(m.durable)):
			return fmt.Errorf("object holds %d bytes after the crash, %d were synced", size, len(m.durable))
		}
		for i := b * block; i < end; i++ {
			c := buf[i-b*block]
			if !m.allowed[i].has(c) {
				return fmt.Errorf("byte %d reads %#x, never written there", i, c)
			}
			if !m.dirty[i] && i < len(m.durable) && c != m.durable[i] {
				return fmt.Errorf("byte %d reads %#x, synced as %#x and untouched since", i, c, m.durable[i])
			}
		}
	}
	return nil
}

// A delete is durable when it returns: after a power cut the objects stay
// gone (before, they came back, held by no file, and leaked for good).
func TestDeleteSurvivesACrash(t *testing.T) {
	disk := simdisk.New(0)
	fatal := func(err error) { t.Fatalf("fatal: %v", err) }
	s, err := osd.OpenStore(disk, "/osd", fatal)
	if err != nil {
		t.Fatal(err)
	}
	for c := uint32(0); c < 3; c++ {
		if _, err := s.Write(osd.ObjKey{Ino: 7, Comp: c}, 1, 0, []byte("data"), osdproto.FlagSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteComps(7, []uint32{0, 1, 2}, 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	disk.Crash(nil)
	if s, err = osd.OpenStore(disk, "/osd", fatal); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for c := uint32(0); c < 3; c++ {
		if n, v, err := s.Stat(osd.ObjKey{Ino: 7, Comp: c}); err != nil || n != 0 || v != 0 {
			t.Fatalf("component %d after a crash: %d bytes, version %d, %v", c, n, v, err)
		}
	}
}

// Write, Truncate and Apply say whether they created the object: only the first
// operation on a missing object does, also after a restart.
func TestWriteReportsCreation(t *testing.T) {
	disk := simdisk.New(0)
	fatal := func(err error) { t.Fatalf("fatal: %v", err) }
	s, err := osd.OpenStore(disk, "/osd", fatal)
	if err != nil {
		t.Fatal(err)
	}
	k := osd.ObjKey{Ino: 9}
	for i, want := range []bool{true, false} {
		if created, err := s.Write(k, 1, 4096, []byte("data"), osdproto.FlagSync); err != nil || created != want {
			t.Fatalf("write %d: created %v (%v), want %v", i, created, err, want)
		}
	}
	s.Close()
	if s, err = osd.OpenStore(disk, "/osd", fatal); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if created, err := s.Truncate(k, 1, 10, 0); err != nil || created {
		t.Fatalf("truncate of an existing object: created %v (%v)", created, err)
	}
	if created, err := s.Truncate(osd.ObjKey{Ino: 10}, 1, 10, 0); err != nil || !created {
		t.Fatalf("truncate of a missing object: created %v (%v)", created, err)
	}
	// A stage applied to a missing object (lost after it was staged).
	lost := osd.ObjKey{Ino: 11}
	if err := s.Stage(lost, 1, 3, 8192, []byte("staged")); err != nil {
		t.Fatal(err)
	}
	// The writer that knows the object holds data says so: the OSD then
	// refuses rather than create it, every time it is asked (a request
	// whose reply was lost is sent again, and must be refused again).
	for range 2 {
		if _, err := s.Apply(lost, 1, 3, osdproto.FlagMustExist); !errors.Is(err, wire.ErrLost) {
			t.Fatalf("apply that must find its object, to a missing one: %v", err)
		}
		if _, err := s.Write(lost, 1, 0, []byte("x"), osdproto.FlagMustExist); !errors.Is(err, wire.ErrLost) {
			t.Fatalf("write that must find its object, to a missing one: %v", err)
		}
		if _, err := s.Truncate(lost, 1, 10, osdproto.FlagMustExist); !errors.Is(err, wire.ErrLost) {
			t.Fatalf("truncate that must find its object, to a missing one: %v", err)
		}
	}
	if created, err := s.Apply(lost, 1, 3, 0); err != nil || !created {
		t.Fatalf("apply to a missing object: created %v (%v)", created, err)
	}
	if created, err := s.Write(lost, 1, 0, []byte("x"), osdproto.FlagMustExist); err != nil || created {
		t.Fatalf("write that must find its object, to an existing one: created %v (%v)", created, err)
	}
}

// Packed objects written, labelled, deleted and compacted across power
// cuts, every change synced: after each crash every object is exactly
// what was last acknowledged (a deleted one stays deleted, an older
// image never comes back, a label stays with its object), and the
// segments compaction left are few.
func TestPackSurvivesCrashesAndCompaction(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		disk := simdisk.New(0)
		fatal := func(err error) { t.Fatalf("seed %d: fatal: %v", seed, err) }
		model := map[osd.ObjKey][]byte{}
		labels := map[osd.ObjKey]string{}
		for round := 0; round < 4; round++ {
			s, err := osd.OpenStore(disk, "/osd", fatal)
			if err != nil {
				t.Fatalf("seed %d: open: %v", seed, err)
			}
			osd.SetPackSegmentBytes(s, 8<<10)
			for k, want := range model {
				got := make([]byte, len(want)+10)
				n, _, err := s.Read(k, 1, 0, got)
				if err != nil || n != int64(len(want)) || !bytes.Equal(got[:n], want) {
					t.Fatalf("seed %d round %d: %v: %d bytes (%v), want %d", seed, round, k, n, err, len(want))
				}
			}
			for ino := uint64(1); ino <= 6; ino++ {
				k := osd.ObjKey{Ino: ino}
				if _, ok := model[k]; !ok {
					if n, v, err := s.Stat(k); n != 0 || v != 0 || err != nil {
						t.Fatalf("seed %d round %d: deleted %v came back: %d bytes, version %d (%v)", seed, round, k, n, v, err)
					}
				}
			}
			entries, _, err := s.ScanLabels("", 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if string(e.Label) != labels[e.Key] {
					t.Fatalf("seed %d round %d: %v labelled %q, want %q", seed, round, e.Key, e.Label, labels[e.Key])
				}
			}
			for op := 0; op < 30; op++ {
				k := osd.ObjKey{Ino: 1 + rng.Uint64N(6)}
				switch rng.IntN(5) {
				case 0:
					if err := s.Delete(k, 1); err != nil {
						t.Fatal(err)
					}
					delete(model, k)
					delete(labels, k)
				case 1:
					if _, ok := model[k]; ok {
						l := fmt.Sprintf("label %d.%d", round, op)
						if err := s.SetLabel(k, 1, []byte(l)); err != nil {
							t.Fatal(err)
						}
						if err := s.Sync(k, 1); err != nil {
							t.Fatal(err)
						}
						labels[k] = l
					}
				case 2:
					if _, err := s.Compact(); err != nil {
						t.Fatal(err)
					}
				default:
					p := make([]byte, 1+rng.IntN(6000))
					for i := range p {
						p[i] = byte(rng.Uint32())
					}
					if _, err := s.Truncate(k, 1, 0, 0); err != nil {
						t.Fatal(err)
					}
					if _, err := s.Write(k, 1, 0, p, osdproto.FlagSync); err != nil {
						t.Fatal(err)
					}
					model[k] = p
				}
			}
			for range 20 {
				if did, err := s.Compact(); err != nil {
					t.Fatal(err)
				} else if !did {
					break
				}
			}
			if n := osd.PackSegments(s); n > 2*len(model)+2 {
				t.Fatalf("seed %d round %d: %d segments hold %d objects after compaction", seed, round, n, len(model))
			}
			s.Close()
			disk.Crash(rng)
		}
	}
}

// Writes taken without the sync flag, to packed objects and to objects
// in files of their own, survive a power cut once SyncAll answered; a
// power cut before it may drop them (the async policy's window).
func TestSyncAllMakesUnsyncedWritesDurable(t *testing.T) {
	disk := simdisk.New(0)
	fatal := func(err error) { t.Fatalf("fatal: %v", err) }
	s, err := osd.OpenStore(disk, "/osd", fatal)
	if err != nil {
		t.Fatal(err)
	}
	small, large := bytes.Repeat([]byte("s"), 4000), bytes.Repeat([]byte("L"), 200<<10)
	want := map[osd.ObjKey][]byte{}
	for i := range 20 {
		k, data := osd.ObjKey{Ino: uint64(100 + i)}, small
		if i%4 == 0 {
			data = large // past the pack: a file of its own
		}
		if _, err := s.Write(k, 1, 0, data, 0); err != nil {
			t.Fatal(err)
		}
		want[k] = data
	}
	if err := s.SyncAll(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	disk.Crash(rand.New(rand.NewPCG(1, 2)))
	if s, err = osd.OpenStore(disk, "/osd", fatal); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for k, data := range want {
		buf := make([]byte, len(data))
		if n, _, err := s.Read(k, 1, 0, buf); err != nil || n != int64(len(data)) || !bytes.Equal(buf, data) {
			t.Fatalf("object %d after SyncAll and a power cut: %d bytes (%v), want %d", k.Ino, n, err, len(data))
		}
	}
}
