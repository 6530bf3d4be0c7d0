package braid_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/bench"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/testcluster"
)

// benchBytes is the file size per operation: 256 MiB by default, or
// BRAID_BENCH_SIZE (e.g. 1GiB, as the README's numbers use).
func benchBytes(b *testing.B) int64 {
	if s := os.Getenv("BRAID_BENCH_SIZE"); s != "" {
		n, err := layout.ParseSize(s)
		if err != nil {
			b.Fatal(err)
		}
		return n &^ (1<<20 - 1)
	}
	return 256 << 20
}

// BenchmarkSequential measures one client's sequential write (through
// close, so durable) and read throughput on an in-process 6-OSD cluster,
// next to loopback TCP and disk write baselines from the same run.
func BenchmarkSequential(b *testing.B) {
	n := benchBytes(b)
	c := testcluster.Start(b, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	b.Run("baseline=loopback-tcp", func(b *testing.B) { benchLoopback(b, n) })
	b.Run("baseline=disk-write", func(b *testing.B) {
		b.SetBytes(n)
		for i := 0; i < b.N; i++ {
			if _, err := bench.DiskWrite(c.Dir, n); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, spec := range []string{"stripe:6", "mirror:3", "ec:4+2", "stripe:6,enc=aes-gcm", "ec:4+2,enc=aes-gcm"} {
		b.Run("write="+spec, func(b *testing.B) { benchWrite(b, cl, spec, n) })
		b.Run("read="+spec, func(b *testing.B) {
			b.SetBytes(n)
			for i := 0; i < b.N; i++ {
				if _, err := bench.Read(ctx, cl, "/bench", spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriteWithoutStorage measures writes against OSDs whose disk
// drops object data (bench.DiscardFS): everything a write costs but the
// disk, next to loopback TCP from the same run.
func BenchmarkWriteWithoutStorage(b *testing.B) {
	n := benchBytes(b)
	c := testcluster.Start(b, testcluster.Options{OSDs: 6, OSDFS: bench.DiscardFS{}})
	cl := c.Dial()
	b.Run("baseline=loopback-tcp", func(b *testing.B) { benchLoopback(b, n) })
	for _, spec := range []string{"stripe:6", "mirror:3", "ec:4+2", "stripe:6,enc=aes-gcm", "ec:4+2,enc=aes-gcm"} {
		b.Run("write="+spec, func(b *testing.B) { benchWrite(b, cl, spec, n) })
	}
}

func benchLoopback(b *testing.B, n int64) {
	b.SetBytes(n)
	for i := 0; i < b.N; i++ {
		if _, err := bench.LoopbackTCP(n); err != nil {
			b.Fatal(err)
		}
	}
}

func benchWrite(b *testing.B, cl *braid.Client, spec string, n int64) {
	b.SetBytes(n)
	for i := 0; i < b.N; i++ {
		if _, err := bench.Write(ctx, cl, "/bench", spec, n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSharedFile measures the N-to-1 pattern: clients writing
// interleaved blocks of one ec:4+2 file (64 MiB, through close), with
// blocks of one stripe (4 MiB: writers never share one) and of 47,008
// bytes (every stripe shared), next to one writer writing the same file
// sequentially in the same run; and 4 KiB writes at random places of an
// existing file through one handle.
func BenchmarkSharedFile(b *testing.B) {
	const spec, size = "ec:4+2", 64 << 20
	c := testcluster.Start(b, testcluster.Options{OSDs: 6})
	b.Run("baseline=one-writer", func(b *testing.B) {
		benchShared(b, c, spec, size, 1, size)
	})
	for _, writers := range []int{2, 4} {
		for _, block := range []int{4 << 20, 47_008} {
			b.Run(fmt.Sprintf("writers=%d/block=%d", writers, block), func(b *testing.B) {
				benchShared(b, c, spec, size, writers, block)
			})
		}
	}
	b.Run("random-4KiB", func(b *testing.B) {
		cl := c.Dial()
		createEmpty(b, cl, "/rand", spec)
		f, err := cl.OpenFile(ctx, "/rand", true)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Truncate(size); err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		buf := make([]byte, 4096)
		b.SetBytes(4096)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := f.WriteAt(buf, rng.Int64N(size/4096)*4096); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	})
	// A few 4 KiB writes at random places of a file holding data, then
	// close: every stripe written is a read-modify-write through the
	// two-phase commit. One op is one handle's writes and close.
	for _, writes := range []int{16, 256, 4096} {
		b.Run(fmt.Sprintf("random-4KiB-over-data/writes=%d", writes), func(b *testing.B) {
			cl := c.Dial()
			createEmpty(b, cl, "/data", spec)
			f, err := cl.OpenFile(ctx, "/data", true)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 3))
			buf := make([]byte, 4096)
			b.SetBytes(int64(writes) * 4096)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, err := cl.OpenFile(ctx, "/data", true)
				if err != nil {
					b.Fatal(err)
				}
				for j := 0; j < writes; j++ {
					if _, err := f.WriteAt(buf, rng.Int64N(size/4096)*4096); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchShared(b *testing.B, c *testcluster.Cluster, spec string, size, writers, block int) {
	var cls []*braid.Client
	for w := 0; w < writers; w++ {
		cls = append(cls, c.Dial())
	}
	b.SetBytes(int64(size))
	for i := 0; i < b.N; i++ {
		createEmpty(b, cls[0], "/shared", spec)
		var files []*braid.File
		for _, cl := range cls {
			f, err := cl.OpenFile(ctx, "/shared", true)
			if err != nil {
				b.Fatal(err)
			}
			files = append(files, f)
		}
		data := make([]byte, block)
		var wg sync.WaitGroup
		for w, f := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for off := w * block; off < size; off += writers * block {
					if _, err := f.WriteAt(data[:min(block, size-off)], int64(off)); err != nil {
						b.Error(err)
						return
					}
				}
				if err := f.Close(); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
}
