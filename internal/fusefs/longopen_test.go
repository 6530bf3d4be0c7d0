package fusefs_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/testcluster"
)

// longOpenScript keeps one file open for a given time and writes it with
// write, mmap stores + msync, ftruncate and fsync in turn, keeping a model
// of what it wrote; at the end it reads the file back through a new
// descriptor and compares. It runs in its own process: a page fault on a
// FUSE file inside the process serving the mount can stall the Go runtime.
const longOpenScript = `import mmap, os, random, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
size = 1 << 20
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, size)
m = mmap.mmap(fd, size)
model = bytearray(size)
rng = random.Random(41)
start, rounds = time.monotonic(), 0
while time.monotonic() - start < seconds and rounds < 5000:
    off = rng.randrange(size - 8192)
    b = rng.randbytes(1 + rng.randrange(8191))
    model[off:off+len(b)] = b
    step = ["msync", "write", "ftruncate"][rounds % 3]
    try:
        if step == "write":
            os.pwrite(fd, b, off)
        else:
            m[off:off+len(b)] = b
            if step == "msync":
                m.flush()
            else:
                os.ftruncate(fd, size)
                os.fsync(fd)
    except OSError as e:
        sys.exit("round %d (%.2fs in): %s: %s" % (rounds, time.monotonic() - start, step, e))
    rounds += 1
m.flush(); m.close(); os.fsync(fd); os.close(fd)
with open(path, "rb") as f:
    got = f.read()
if got != bytes(model):
    sys.exit("file read back differs from what was written (%d rounds)" % rounds)
print(rounds)
`

// A file kept open through the mount and written with write, mmap +
// msync and ftruncate across several capability lifetimes never fails,
// reads back exactly, and has nothing marked dirty.
func TestLongOpenFileThroughMount(t *testing.T) {
	const capTTL = 500 * time.Millisecond
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, CapTTL: capTTL})
	m := mountAt(t, c)
	seconds := fmt.Sprint((5 * capTTL).Seconds())
	out, err := exec.Command("python3", "-c", longOpenScript, filepath.Join(m, "long"), seconds).CombinedOutput()
	if err != nil {
		t.Fatalf("file kept open across capability lifetimes: %v\n%s", err, out)
	}
	fi, err := c.Dial().Stat(context.Background(), "/long")
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range fi.Layout.Components {
		if comp.Dirty {
			t.Fatalf("component %d marked dirty (after %s rounds)", comp.Index, out)
		}
	}
}
