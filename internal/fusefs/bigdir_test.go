package fusefs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// bigDirEntries is the directory size of item 2 of the mount's contract:
// listing a directory of 100k entries through the kernel, with offsets that
// stay valid when the listing is resumed from a saved position.
const bigDirEntries = 100_000

// TestHundredThousandEntryDirectory fills one directory with 100k entries
// through the client library (8 writers; through the mount it would take
// minutes of single-threaded creates), then lists it through the mount with
// getdents in 32 KiB batches: every name must appear exactly once, and
// seeking back to the offset saved halfway (telldir, then seekdir on the
// same stream, as POSIX defines them) lists the same tail again.
func TestHundredThousandEntryDirectory(t *testing.T) {
	c, m := mountCluster(t, 3)
	if err := os.Mkdir(filepath.Join(m, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(m, "big"), &st); err != nil {
		t.Fatal(err)
	}
	cl := c.Dial()
	start := time.Now()
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < bigDirEntries; i += writers {
				name := fmt.Sprintf("entry-%06d", i)
				if _, err := cl.Symlink(context.Background(), st.Ino, name, "t", 0, 0); err != nil {
					errs <- fmt.Errorf("symlink %s: %w", name, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	created := time.Now()
	dir := filepath.Join(m, "big")
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 32<<10)
	// readToEnd lists from the descriptor's position to the end, noting the
	// offset (telldir) at which the batch past stopAt started.
	readToEnd := func(stopAt int) (names []string, resumeAt int64) {
		t.Helper()
		resumeAt = -1
		for batches := 0; batches < 2*bigDirEntries; batches++ {
			if resumeAt < 0 && len(names) >= stopAt {
				if resumeAt, err = unix.Seek(fd, 0, 1); err != nil {
					t.Fatal(err)
				}
			}
			n, err := unix.Getdents(fd, buf)
			if err != nil {
				t.Fatalf("getdents: %v", err)
			}
			if n == 0 {
				return names, resumeAt
			}
			_, _, names = unix.ParseDirent(buf[:n], -1, names)
		}
		t.Fatal("listing never ended")
		return nil, 0
	}
	all, half := readToEnd(bigDirEntries / 2)
	listed := time.Now()
	seen := make(map[string]int, len(all))
	for _, name := range all {
		seen[name]++
	}
	delete(seen, ".")
	delete(seen, "..")
	if len(seen) != bigDirEntries {
		t.Fatalf("listed %d distinct names, want %d", len(seen), bigDirEntries)
	}
	for name, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", name, n)
		}
	}
	// Back to the saved offset (seekdir): the same tail, in the same order.
	if _, err := unix.Seek(fd, half, 0); err != nil {
		t.Fatal(err)
	}
	tail, _ := readToEnd(bigDirEntries)
	want := all[len(all)-len(tail):]
	if len(tail) == 0 || len(tail) >= len(all) || !slices.Equal(tail, want) {
		t.Fatalf("after seekdir: %d names, want the %d after the saved offset", len(tail), len(want))
	}
	t.Logf("created %d entries in %v, listed them in %v", bigDirEntries, created.Sub(start).Round(time.Millisecond), listed.Sub(created).Round(time.Millisecond))
}
