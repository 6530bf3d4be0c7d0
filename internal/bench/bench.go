// Package bench measures braid's sequential throughput next to what the
// machine's loopback TCP and disk can do, measured in the same run, so
// results are comparable as ratios across machines.
package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/osd"
)

// chunkBytes is the size of each write in every measurement.
const chunkBytes = 1 << 20

// Result is one measurement.
type Result struct {
	Name    string
	Bytes   int64
	Elapsed time.Duration
	// Expansion is the bytes stored per byte written (K+M)/K for a write,
	// 0 otherwise: the write can go no faster than disk speed / Expansion.
	Expansion float64
}

// GBps is decimal gigabytes per second.
func (r Result) GBps() float64 { return float64(r.Bytes) / r.Elapsed.Seconds() / 1e9 }

// pattern is incompressible data reused for every chunk.
func pattern() []byte {
	b := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// LoopbackTCP streams n bytes over one 127.0.0.1 connection in 1 MiB writes.
func LoopbackTCP(n int64) (Result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, err
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		_, err = io.CopyBuffer(io.Discard, c, make([]byte, chunkBytes))
		got <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return Result{}, err
	}
	buf := pattern()[:chunkBytes]
	start := time.Now()
	for sent := int64(0); sent < n; sent += chunkBytes {
		if _, err := conn.Write(buf); err != nil {
			conn.Close()
			return Result{}, err
		}
	}
	conn.Close()
	if err := <-got; err != nil {
		return Result{}, err
	}
	return Result{Name: "loopback TCP", Bytes: n, Elapsed: time.Since(start)}, nil
}

// DiskWrite writes n bytes to a file in dir in 1 MiB writes and fsyncs it.
func DiskWrite(dir string, n int64) (Result, error) {
	path := filepath.Join(dir, fmt.Sprintf("braid-bench-%d", os.Getpid()))
	f, err := os.Create(path)
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(path)
	defer f.Close()
	data := pattern()
	start := time.Now()
	for off := int64(0); off < n; off += chunkBytes {
		i := off % int64(len(data))
		if _, err := f.Write(data[i : i+chunkBytes]); err != nil {
			return Result{}, err
		}
	}
	if err := f.Sync(); err != nil {
		return Result{}, err
	}
	return Result{Name: "disk write+fsync", Bytes: n, Elapsed: time.Since(start)}, nil
}

// Write creates path with spec and writes n bytes in 1 MiB writes; the
// time includes Close, which waits until every OSD has the data on disk.
func Write(ctx context.Context, c *braid.Client, path, spec string, n int64) (Result, error) {
	f, err := c.Create(ctx, path, braid.CreateOptions{Layout: spec, SizeHint: n})
	if err != nil {
		return Result{}, err
	}
	data := pattern()
	start := time.Now()
	for off := int64(0); off < n; off += chunkBytes {
		i := off % int64(len(data))
		if _, err := f.WriteAt(data[i:i+chunkBytes], off); err != nil {
			f.Close()
			return Result{}, err
		}
	}
	if err := f.Close(); err != nil {
		return Result{}, err
	}
	return Result{Name: "write " + spec, Bytes: n, Elapsed: time.Since(start), Expansion: expansion(spec)}, nil
}

// Read reads the whole file at path and discards it.
func Read(ctx context.Context, c *braid.Client, path, spec string) (Result, error) {
	f, err := c.Open(ctx, path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	start := time.Now()
	n, err := f.WriteTo(io.Discard)
	if err != nil {
		return Result{}, err
	}
	return Result{Name: "read " + spec, Bytes: n, Elapsed: time.Since(start)}, nil
}

func expansion(spec string) float64 {
	s, err := layout.Parse(spec)
	if err != nil {
		return 0
	}
	return float64(s.Width()) / float64(s.K)
}

// Report prints results as a table with each one's ratio to loopback TCP
// and, for writes, to the disk's bound: disk speed / expansion.
func Report(w io.Writer, tcp, disk Result, results []Result) {
	fmt.Fprintf(w, "%-28s %8s %8s %8s %14s\n", "measurement", "GB/s", "seconds", "vs TCP", "vs disk bound")
	for _, r := range results {
		bound := ""
		if r.Expansion > 0 {
			bound = fmt.Sprintf("%.2fx", r.GBps()/(disk.GBps()/r.Expansion))
		}
		fmt.Fprintf(w, "%-28s %8.2f %8.2f %7.2fx %14s\n", r.Name, r.GBps(), r.Elapsed.Seconds(), r.GBps()/tcp.GBps(), bound)
	}
}

// DiscardFS is a disk that keeps everything but object data: data files
// only grow (sparse) as writes land, their bytes are dropped. An OSD on it
// does all its own work except the write to the disk, so a write measured
// against it shows what the client, the network and the OSD can carry
// when storage is not the limit. Reads of such data fail their checksums.
type DiscardFS struct{ osd.OSFS }

func (d DiscardFS) OpenFile(name string, flag int, perm os.FileMode) (osd.File, error) {
	f, err := d.OSFS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".dat") {
		return f, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &discardFile{File: f, size: fi.Size()}, nil
}

// discardFile is a data file whose writes only grow it. The store
// serializes writes to an object, so size needs no lock.
type discardFile struct {
	osd.File
	size int64
}

func (f *discardFile) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > f.size {
		if err := f.Truncate(end); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (f *discardFile) Truncate(size int64) error {
	if err := f.File.Truncate(size); err != nil {
		return err
	}
	f.size = size
	return nil
}
