package braid_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

func sharedBlock(i, size int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("<block %06d>", i)), size/14+1)[:size]
}

// writeInterleaved has each of the files write every len(files)-th
// block, concurrently, syncing every syncEvery blocks (0: only at close).
func writeInterleaved(t *testing.T, files []*braid.File, blocks, size, syncEvery int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(files))
	for w, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for i := w; i < blocks && errs[w] == nil; i += len(files) {
				_, errs[w] = f.WriteAt(sharedBlock(i, size), int64(i*size))
				if n++; syncEvery > 0 && n%syncEvery == 0 && errs[w] == nil {
					errs[w] = f.Sync()
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
			put(t, cls[0], path, "ec:4+2,unit=64KiB", nil)
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
