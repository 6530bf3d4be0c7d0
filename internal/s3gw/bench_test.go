package s3gw_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/layout"
)

// BenchmarkS3 compares the gateway with the client library doing the same
// work on the same in-process 6-OSD cluster: one large object written and
// read (BRAID_BENCH_SIZE, default 256MiB; the README uses 1GiB), and
// 4 KiB objects written and read by 16 concurrent clients. The S3 side is
// the AWS Go SDK v2 with its defaults (signed payload over http).
func BenchmarkS3(b *testing.B) {
	size := int64(256 << 20)
	if s := os.Getenv("BRAID_BENCH_SIZE"); s != "" {
		n, err := layout.ParseSize(s)
		if err != nil {
			b.Fatal(err)
		}
		size = n
	}
	e := start(b)
	ctx := context.Background()
	for _, bk := range []string{"bench", "small"} {
		if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bk)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.cl.Mkdir(ctx, "/lib", false); err != nil {
		b.Fatal(err)
	}
	size &^= 1<<20 - 1
	big := bytes.Repeat(randBytes(7, 1<<20), int(size>>20)) // no compression anywhere: random enough
	var wroteBig sync.Once
	writeBig := func(b *testing.B) { // for a get run alone
		wroteBig.Do(func() {
			libPut(b, e.cl, "/lib/big", big)
			if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String("big"), Body: bytes.NewReader(big)}); err != nil {
				b.Fatal(err)
			}
		})
		b.ResetTimer()
	}
	name := fmt.Sprintf("%dMiB", size>>20)

	b.Run("put-"+name+"/library", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			libPut(b, e.cl, "/lib/big", big)
		}
	})
	b.Run("put-"+name+"/s3", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String("big"), Body: bytes.NewReader(big)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get-"+name+"/library", func(b *testing.B) {
		writeBig(b)
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if n := libGet(b, e.cl, "/lib/big"); n != size {
				b.Fatalf("read %d bytes", n)
			}
		}
	})
	b.Run("get-"+name+"/s3", func(b *testing.B) {
		writeBig(b)
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if n := s3Get(b, e.s3, "bench", "big"); n != size {
				b.Fatalf("read %d bytes", n)
			}
		}
	})

	small := randBytes(8, 4096)
	const workers = 16
	b.Run("put-4KiB-c16/library", func(b *testing.B) {
		concurrently(b, workers, func(i int) { libPut(b, e.cl, fmt.Sprintf("/lib/o%d", i), small) })
	})
	b.Run("put-4KiB-c16/s3", func(b *testing.B) {
		concurrently(b, workers, func(i int) {
			if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("small"), Key: aws.String(fmt.Sprintf("o%d", i)),
				Body: bytes.NewReader(small)}); err != nil {
				b.Error(err)
			}
		})
	})
	const readSet = 1000 // small objects the get runs read, written once
	var once sync.Once
	writeReadSet := func(b *testing.B) {
		once.Do(func() {
			for i := 0; i < readSet; i++ {
				libPut(b, e.cl, fmt.Sprintf("/lib/r%d", i), small)
				if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("small"), Key: aws.String(fmt.Sprintf("r%d", i)),
					Body: bytes.NewReader(small)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.ResetTimer()
	}
	b.Run("get-4KiB-c16/library", func(b *testing.B) {
		writeReadSet(b)
		concurrently(b, workers, func(i int) { libGet(b, e.cl, fmt.Sprintf("/lib/r%d", i%readSet)) })
	})
	b.Run("get-4KiB-c16/s3", func(b *testing.B) {
		writeReadSet(b)
		concurrently(b, workers, func(i int) { s3Get(b, e.s3, "small", fmt.Sprintf("r%d", i%readSet)) })
	})
}

// concurrently runs op(0..b.N-1) on n goroutines and reports ops/s.
func concurrently(b *testing.B, n int, op func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				op(int(i))
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func libPut(b *testing.B, cl *braid.Client, p string, data []byte) {
	f, err := cl.Create(context.Background(), p, braid.CreateOptions{SizeHint: int64(len(data))})
	if err != nil {
		b.Error(err)
		return
	}
	if _, err := f.ReadFrom(bytes.NewReader(data)); err != nil {
		b.Error(err)
	}
	if err := f.Close(); err != nil {
		b.Error(err)
	}
}

func libGet(b *testing.B, cl *braid.Client, p string) int64 {
	f, err := cl.Open(context.Background(), p)
	if err != nil {
		b.Error(err)
		return 0
	}
	defer f.Close()
	n, err := f.WriteTo(io.Discard)
	if err != nil {
		b.Error(err)
	}
	return n
}

func s3Get(b *testing.B, c *s3.Client, bucket, key string) int64 {
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		b.Error(err)
		return 0
	}
	defer out.Body.Close()
	n, err := io.Copy(io.Discard, out.Body)
	if err != nil {
		b.Error(err)
	}
	return n
}
