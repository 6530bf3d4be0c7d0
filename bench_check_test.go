package braid_test

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// BenchmarkCheckAndScrub measures `braid check` and `braid scrub` over a
// tree of dense and sparse files (the sparse ones 1 GiB apparent with 2
// MiB of data each), in MiB of stored unit bytes read per second, next to
// the disk's own read rate over the same objects in the same run: every
// measurement starts with the page cache dropped where the process may
// (root), so all three read the disk. The objects' bytes are the
// baseline's: what a checker that reads nothing twice and skips holes
// must read.
func BenchmarkCheckAndScrub(b *testing.B) {
	c := testcluster.Start(b, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(35, 7))
	if err := cl.Mkdir(ctx, "/tree", false); err != nil {
		b.Fatal(err)
	}
	for i := range 16 {
		put(b, cl, fmt.Sprintf("/tree/dense%d", i), "ec:4+2,unit=1MiB", randBytes(rng, 16<<20))
		f, err := cl.Create(ctx, fmt.Sprintf("/tree/sparse%d", i), braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
		if err != nil {
			b.Fatal(err)
		}
		for at := int64(0); at < 1<<30; at += 128 << 20 {
			if _, err := f.WriteAt(randBytes(rng, 256<<10), at); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	cold := dropCaches()
	b.Logf("page cache dropped before each run: %v", cold)
	b.Run("baseline=disk-read", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dropCaches()
			start := time.Now()
			n, err := readObjects(c.Dir)
			if err != nil {
				b.Fatal(err)
			}
			reportRate(b, n, time.Since(start))
		}
	})
	b.Run("check", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dropCaches()
			start := time.Now()
			rep, err := cl.Check(ctx, "/tree")
			if err != nil || len(rep.Problems) > 0 {
				b.Fatalf("check: %v %q", err, rep.Problems)
			}
			reportRate(b, rep.BytesRead, time.Since(start))
		}
	})
	b.Run("scrub", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			dropCaches()
			before, err := cl.Status(ctx)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			n, err := cl.Scrub(ctx, "/tree")
			if err != nil {
				b.Fatal(err)
			}
			var st braid.Status
			testcluster.Eventually(b, 10*time.Minute, func() bool {
				st, err = cl.Status(ctx)
				return err == nil && st.Repair.ScrubQueued == 0 && st.Repair.Active == 0 && st.Repair.ScrubTaken-before.Repair.ScrubTaken >= n
			}, func() string { return fmt.Sprintf("scrub not done: %+v", st.Repair) })
			reportRate(b, st.Repair.ScrubBytes-before.Repair.ScrubBytes, time.Since(start))
		}
	})
}

// reportRate reports n bytes read in took as MiB/s.
func reportRate(b *testing.B, n int64, took time.Duration) {
	b.ReportMetric(float64(n)/(1<<20)/took.Seconds(), "MiB/s")
	b.ReportMetric(float64(n)/(1<<20), "MiB")
}

// readObjects reads the data of every object file under dir (the holes
// of sparse ones skipped, as the OSDs' data maps do) and returns the
// bytes read.
func readObjects(dir string) (int64, error) {
	var total int64
	buf := make([]byte, 1<<20)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".dat") {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		for off := int64(0); ; {
			data, hole, err := nextDataRange(f, off)
			if err != nil {
				return nil // no more data
			}
			for at := data; at < hole; {
				n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-at)], at)
				total += int64(n)
				at += int64(n)
				if err == io.EOF || n == 0 {
					break
				}
				if err != nil {
					return err
				}
			}
			off = hole
		}
	})
	return total, err
}

// dropCaches empties the page cache, so reads go to the disk; false where
// the process may not.
func dropCaches() bool {
	syncFS()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0) == nil
}

// nextDataRange is f's next data range from off (SEEK_DATA, SEEK_HOLE).
func nextDataRange(f *os.File, off int64) (data, hole int64, err error) {
	data, err = unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	if err != nil {
		return 0, 0, err
	}
	hole, err = unix.Seek(int(f.Fd()), data, unix.SEEK_HOLE)
	return data, hole, err
}

func syncFS() { unix.Sync() }
