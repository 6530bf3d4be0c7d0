package braid_test

import (
	"os"
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
	for _, spec := range []string{"stripe:6", "mirror:3", "ec:4+2"} {
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
	for _, spec := range []string{"stripe:6", "mirror:3", "ec:4+2"} {
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
