package fusefs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fileModelScript applies one random sequence of operations to a file
// through the mount and to a file on the local disk, through several
// descriptors kept open on each (read-write and read-only): pwrite of
// sizes from a byte to a few stripes at any offset, stores through a
// fresh shared mapping with msync, ftruncate, fallocate in every mode
// Linux offers (allocate with and without keep-size, punch hole, zero
// range), fsync, closing and reopening a descriptor, and reads through
// any descriptor. Every step's errno must match, every read and size must
// match, and every so often the whole file is compared. It runs in its
// own process: a page fault on a FUSE file inside the process serving
// the mount can stall the Go runtime.
const fileModelScript = `import ctypes, errno, mmap, os, random, sys
mnt, loc, seed, ops = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
KEEP, PUNCH, ZERO = 1, 2, 16
def fallocate(fd, mode, off, n):
    if libc.fallocate(fd, mode, off, n) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
rng = random.Random(seed)
STRIPE = 4 << 20
MAXSIZE = 3 * STRIPE + 12345
paths = [loc, mnt]
for p in paths:
    open(p, "wb").close()
MODES = [0, KEEP, PUNCH | KEEP, ZERO, ZERO | KEEP, PUNCH]
for mode in (ZERO, ZERO | KEEP):  # some file systems (tmpfs) and older FUSE kernels refuse zero range
    for p in paths:
        fd = os.open(p, os.O_RDWR)
        try:
            fallocate(fd, mode, 0, 1)
        except OSError:
            MODES = [m for m in MODES if m != mode]
        finally:
            os.ftruncate(fd, 0)
            os.close(fd)
RW, RO = 3, 2
fds = [[os.open(p, os.O_RDWR) for _ in range(RW)] + [os.open(p, os.O_RDONLY) for _ in range(RO)] for p in paths]
def fail(step, what, msg):
    sys.exit("seed %d step %d (%s): %s" % (seed, step, what, msg))
TRACE = os.environ.get("BRAID_FILE_TRACE")
def both(step, what, op):
    if TRACE:
        print(step, what, file=sys.stderr)
    res = []
    for i in range(2):
        try:
            res.append((0, op(i)))
        except OSError as e:
            res.append((e.errno, None))
    if res[0][0] != res[1][0]:
        fail(step, what, "local errno %s, braid errno %s" % (res[0][0], res[1][0]))
    return res
def size_of(i):
    return os.fstat(fds[i][0]).st_size
def rand_off():
    k = rng.randrange(4)
    if k == 0:
        return rng.randrange(MAXSIZE)
    if k == 1:
        return rng.randrange(MAXSIZE // 4096) * 4096
    if k == 2:
        return rng.randrange(3) * STRIPE + rng.choice([0, 1, 4095, 4096, STRIPE - 1]) % STRIPE
    return rng.randrange(max(1, size_of(0) + 1))
def rand_len():
    return rng.choice([1, 7, 512, 4096, 4096, 47008, 65536, 1 << 20, STRIPE + 3, rng.randrange(1, 2 * STRIPE)])
for step in range(ops):
    k = rng.randrange(100)
    if k < 40:
        off, n = rand_off(), rand_len()
        n = max(1, min(n, MAXSIZE - off))
        data = rng.randbytes(n)
        d = rng.randrange(RW)
        what = "pwrite fd%d %d+%d" % (d, off, n)
        both(step, what, lambda i: os.pwrite(fds[i][d], data, off))
    elif k < 50:
        size = rng.choice([0, rng.randrange(MAXSIZE), rng.randrange(3) * STRIPE, size_of(0) + rng.randrange(-5000, 5000)])
        size = max(0, min(size, MAXSIZE))
        d = rng.randrange(RW)
        what = "ftruncate fd%d %d" % (d, size)
        both(step, what, lambda i: os.ftruncate(fds[i][d], size))
    elif k < 60:
        mode = rng.choice(MODES)
        off, n = rand_off(), rand_len()
        n = max(1, min(n, MAXSIZE - off))
        d = rng.randrange(RW)
        what = "fallocate fd%d mode %d %d+%d" % (d, mode, off, n)
        both(step, what, lambda i: fallocate(fds[i][d], mode, off, n))
    elif k < 68:
        size = size_of(0)
        if size != size_of(1):
            fail(step, "mmap", "sizes differ: local %d, braid %d" % (size, size_of(1)))
        if size == 0:
            continue
        off = rng.randrange(size)
        n = min(rng.choice([1, 100, 4096, 70000]), size - off)
        data = rng.randbytes(n)
        d = rng.randrange(RW)
        what = "mmap store fd%d %d+%d" % (d, off, n)
        def store(i):
            m = mmap.mmap(fds[i][d], size)
            m[off:off+n] = data
            m.flush()
            m.close()
        both(step, what, store)
    elif k < 72:
        d = rng.randrange(RW)
        what = "fsync fd%d" % d
        both(step, what, lambda i: os.fsync(fds[i][d]))
    elif k < 77:
        d = rng.randrange(RW + RO)
        what = "reopen fd%d" % d
        flags = os.O_RDWR if d < RW else os.O_RDONLY
        def reopen(i):
            os.close(fds[i][d])
            fds[i][d] = os.open(paths[i], flags)
        both(step, what, reopen)
    else:
        d = rng.randrange(RW + RO)
        off, n = rand_off(), rand_len()
        what = "pread fd%d %d+%d" % (d, off, n)
        r = both(step, what, lambda i: os.pread(fds[i][d], n, off))
        if r[0][1] != r[1][1]:
            a, b = r[0][1], r[1][1]
            at = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            fail(step, what, "local %d bytes, braid %d, first difference at %d" % (len(a), len(b), off + at))
    if TRACE and step % 1 == 0:
        print("   sizes", size_of(0), size_of(1), file=sys.stderr)
    if step % 25 == 24 or step == ops - 1:
        if size_of(0) != size_of(1):
            fail(step, "stat", "size local %d, braid %d" % (size_of(0), size_of(1)))
        got = [open(p, "rb").read() for p in paths]
        if got[0] != got[1]:
            at = next((j for j in range(min(map(len, got))) if got[0][j] != got[1][j]), min(map(len, got)))
            fd = os.open(paths[1], os.O_RDONLY)
            extra = "fresh descriptor: size %d, pread 16 at 0: %d bytes; pread through fd0: %d bytes" % (os.fstat(fd).st_size, len(os.pread(fd, 16, 0)), len(os.pread(fds[1][0], 16, 0)))
            os.close(fd)
            fail(step, "compare", "files differ first at %d (local %d bytes, braid %d); %s" % (at, len(got[0]), len(got[1]), extra))
for i in range(2):
    for fd in fds[i]:
        os.close(fd)
got = [open(p, "rb").read() for p in paths]
if got[0] != got[1]:
    fail(ops, "final compare", "files differ after every descriptor closed (local %d bytes, braid %d)" % (len(got[0]), len(got[1])))
print(ops, len(got[0]))
`

// TestFileOperationsAgainstLocalFile runs fileModelScript: one file
// through the mount and one on the local disk, the same random writes,
// mmap stores, truncations, fallocate calls, syncs and reads through
// several descriptors, compared step by step. BRAID_SEED replays a run;
// BRAID_FILE_OPS lengthens it (millions for a soak).
func TestFileOperationsAgainstLocalFile(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("needs python3 (the suite installs what it needs: see README)")
	}
	seed, ops := seedAndLength(t, "BRAID_FILE_OPS", 300)
	_, m := mountCluster(t, 6)
	local := filepath.Join(t.TempDir(), "f")
	out, err := exec.Command("python3", "-c", fileModelScript, filepath.Join(m, "f"), local,
		strconv.FormatUint(seed, 10), strconv.Itoa(ops)).CombinedOutput()
	if err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, out)
	}
}

// TestSealedFileOperationsAgainstLocalFile runs the same script on an
// encrypted file (its directory's layout has enc=aes-gcm): every write,
// mmap store, truncation, hole and read lands on 4 KiB blocks sealed by
// the client, and must still match the local file byte for byte.
func TestSealedFileOperationsAgainstLocalFile(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("needs python3 (the suite installs what it needs: see README)")
	}
	seed, ops := seedAndLength(t, "BRAID_FILE_OPS", 300)
	c, m := mountCluster(t, 6)
	cl := c.Dial()
	if err := cl.Mkdir(context.Background(), "/enc", false); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetLayout(context.Background(), "/enc", "ec:4+2,unit=16KiB,enc=aes-gcm"); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "f")
	out, err := exec.Command("python3", "-c", fileModelScript, filepath.Join(m, "enc", "f"), local,
		strconv.FormatUint(seed, 10), strconv.Itoa(ops)).CombinedOutput()
	if err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, out)
	}
	fi, err := cl.Stat(context.Background(), "/enc/f")
	if err != nil || !strings.Contains(fi.Layout.Spec, "enc=aes-gcm") {
		t.Fatalf("the file through the mount is not sealed: %+v %v", fi.Layout, err)
	}
	st, err := os.Stat(local)
	if err != nil || fi.Size != st.Size() {
		t.Fatalf("size at the MDS %d, local file %d (%v)", fi.Size, st.Size(), err)
	}
}
