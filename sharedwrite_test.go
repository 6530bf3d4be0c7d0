package braid_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// createEmpty makes an empty file of layout spec (put would mirror it:
// it tells the MDS the size, and small files are mirrored).
func createEmpty(t testing.TB, cl *braid.Client, path, spec string) {
	t.Helper()
	f, err := cl.Create(ctx, path, braid.CreateOptions{Layout: spec, SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func sharedBlock(i, size int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("<block %06d>", i)), size/14+1)[:size]
}

// writeInterleaved has each of the files write every len(files)-th
// block, concurrently, syncing every syncEvery blocks (0: only at close).
func writeInterleaved(t *testing.T, files []*braid.File, blocks, size, syncEvery int) {
	t.Helper()
	writeBlocks(t, files, 0, blocks, size, syncEvery)
	closeAll(t, files)
}

// writeBlocks has each of the files write every len(files)-th block of
// blocks [from, to), concurrently.
func writeBlocks(t *testing.T, files []*braid.File, from, to, size, syncEvery int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(files))
	for w, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := from + w; i < to && errs[w] == nil; i += len(files) {
				_, errs[w] = f.WriteAt(sharedBlock(i, size), int64(i*size))
				if n++; syncEvery > 0 && n%syncEvery == 0 && errs[w] == nil {
					errs[w] = f.Sync()
				}
			}
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
}

func closeAll(t *testing.T, files []*braid.File) {
	t.Helper()
	for w, f := range files {
		if err := f.Close(); err != nil {
			t.Fatalf("writer %d: close: %v", w, err)
		}
	}
}

func checkShared(t *testing.T, cl *braid.Client, path string, blocks, size int) {
	t.Helper()
	got, err := get(t, cl, path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != blocks*size {
		t.Errorf("%s is %d bytes, want %d", path, len(got), blocks*size)
	}
	var bad []int
	for i := 0; i < blocks; i++ {
		lo, hi := min(i*size, len(got)), min((i+1)*size, len(got))
		if !bytes.Equal(got[lo:hi], sharedBlock(i, size)) {
			bad = append(bad, i)
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s: %d of %d blocks lost or wrong: %v", path, len(bad), blocks, bad[:min(len(bad), 20)])
	}
}

// Writers in separate clients (separate mounts, separate machines) write
// interleaved blocks of one file that share stripes; each block lands and
// the size covers them all. Also two handles of one client.
func TestInterleavedWritersAcrossClients(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	const blocks, size = 120, 47_008
	for _, tc := range []struct {
		name      string
		clients   int
		syncEvery int
	}{
		{"two clients", 2, 0},
		{"three clients syncing", 3, 7},
		{"one client two handles", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cls []*braid.Client
			for i := 0; i < tc.clients; i++ {
				cls = append(cls, c.Dial())
			}
			path := "/" + tc.name
			createEmpty(t, cls[0], path, "ec:4+2,unit=64KiB")
			var files []*braid.File
			for w := 0; w < max(tc.clients, 2); w++ {
				f, err := cls[w%len(cls)].OpenFile(ctx, path, true)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			writeInterleaved(t, files, blocks, size, tc.syncEvery)
			checkShared(t, cls[0], path, blocks, size)
		})
	}
}

// Overlapping writes from several clients leave every byte from one of
// the writes, and parity agrees with the data: the file reads the same
// with any one OSD down. Between their overlapping writes, each writer
// also writes small blocks of its own in the same stripes (disjoint from
// everything else): those all land.
func TestOverlappingWritersKeepParity(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	const spec, writers, rounds = "ec:4+2,unit=16KiB", 3, 60
	const shared, own = 100_000, 40 // overlapping writes in [0, shared); own blocks past it
	const size = shared + writers*rounds*own
	cl := c.Dial()
	createEmpty(t, cl, "/o", spec)
	var files []*braid.File
	for w := 0; w < writers; w++ {
		f, err := c.Dial().OpenFile(ctx, "/o", true)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	ownBlock := func(w, i int) (int64, []byte) {
		return int64(shared + (i*writers+w)*own), []byte(fmt.Sprintf("%-*s", own, fmt.Sprintf("w%d/%d", w, i)))
	}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			buf := bytes.Repeat([]byte{byte('a' + w)}, 20_000)
			for i := 0; i < rounds && errs[w] == nil; i++ {
				off := rng.Int64N(shared - int64(len(buf)))
				if _, errs[w] = f.WriteAt(buf[:1+rng.IntN(len(buf))], off); errs[w] == nil {
					off, b := ownBlock(w, i)
					_, errs[w] = f.WriteAt(b, off)
				}
			}
			if err := f.Close(); errs[w] == nil {
				errs[w] = err
			}
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	want, err := get(t, cl, "/o")
	if err != nil || len(want) != size {
		t.Fatalf("read %d bytes, err %v; want %d", len(want), err, size)
	}
	for i, b := range want[:shared] {
		if b != 0 && (b < 'a' || b >= 'a'+writers) {
			t.Fatalf("byte %d is %q: from none of the writes", i, b)
		}
	}
	var lost []string
	for w := 0; w < writers; w++ {
		for i := 0; i < rounds; i++ {
			off, b := ownBlock(w, i)
			if !bytes.Equal(want[off:off+own], b) {
				lost = append(lost, string(bytes.TrimSpace(b))+"="+fmt.Sprintf("%q", want[off:off+8]))
			}
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d blocks of a single writer lost: %v", len(lost), writers*rounds, lost[:min(len(lost), 10)])
	}
	mustReadEachOSDDown(t, c, cl, "/o", "overlapping writers' file", want)
}

// A truncation by one writer holds against another that wrote before it
// and commits after: the other's view of the size is of an older
// generation and does not bring the cut bytes back.
func TestTruncateByAnotherWriterHolds(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	const spec = "ec:4+2,unit=16KiB"
	a, b := c.Dial(), c.Dial()
	createEmpty(t, a, "/t", spec)
	fa, err := a.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("A"), 200_000)
	if _, err := fa.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt(data[:50_000], 200_000); err != nil { // not yet committed
		t.Fatal(err)
	}
	fb, err := b.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.Truncate(1000); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil { // commits a size seen before the truncation
		t.Fatal(err)
	}
	mustRead(t, a, "/t", "after another writer's truncation", data[:1000])
	// A write after the truncation counts again.
	fa, err = a.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt([]byte("end"), 5000); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, a, "/t", "after a write past the cut", append(append(data[:1000:1000], make([]byte, 4000)...), "end"...))
}

// Writers of one file go on across an MDS restart: their locks lapse,
// the new MDS grants none for a lease (locks were held), then they ask
// again; no block is lost.
func TestSharedFileWritersAcrossAnMDSRestart(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	const blocks, size = 120, 47_008
	cl := c.Dial()
	createEmpty(t, cl, "/r", "ec:4+2,unit=64KiB")
	var files []*braid.File
	for w := 0; w < 2; w++ {
		f, err := c.Dial().OpenFile(ctx, "/r", true)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	writeBlocks(t, files, 0, blocks/2, size, 0)
	c.RestartMDS()
	writeBlocks(t, files, blocks/2, blocks, size, 0)
	closeAll(t, files)
	checkShared(t, cl, "/r", blocks, size)
}

// countApplied counts the applied-stage tombstones on every OSD: one per
// unit of a staged write.
func countApplied(c *testcluster.Cluster) (n int) {
	for i := range c.OSDs {
		_ = filepath.WalkDir(c.OSDDir(i), func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, ".app") {
				n++
			}
			return nil
		})
	}
	return n
}

// A stripe holding committed data that a handle writes in two pieces
// (its buffer filled with the stripe's bytes in between, gather.go) still
// goes through the two-phase commit (found by review: sent as plain unit
// writes, the write hole the staged path closes).
func TestFilledStripeIsStaged(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(1, 2))
	want := randBytes(rng, 200_000)
	f, err := cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:2+1,unit=32KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	before := countApplied(c)
	for _, off := range []int{70_000, 100_000} { // stripe 1, not contiguous
		p := randBytes(rng, 4096)
		copy(want[off:], p)
		if _, err := f.WriteAt(p, int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustRead(t, cl, "/f", "after the overwrite", want)
	if countApplied(c) == before {
		t.Fatal("a partial overwrite of committed stripe 1 was not staged")
	}
}

// Goroutines sharing one handle (as processes share a mount's handle of
// an inode) write interleaved blocks of a quarter stripe and more: the
// stripe buffer one leaves half written backs the stripe's gathered
// extents (parkLocked), and every block lands.
func TestGoroutinesSharingOneHandle(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	for _, size := range []int{100_000, 262_144 + 1000} {
		path := fmt.Sprintf("/one-handle-%d", size)
		createEmpty(t, cl, path, "ec:4+2,unit=64KiB")
		f, err := cl.OpenFile(ctx, path, true)
		if err != nil {
			t.Fatal(err)
		}
		const blocks = 90
		writeBlocks(t, []*braid.File{f, f, f}, 0, blocks, size, 0)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		checkShared(t, cl, path, blocks, size)
		checkConsistent(t, cl, path)
	}
}
