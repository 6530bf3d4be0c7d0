package braid_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// cutOff is a client network that can cut the client off from one
// address (the MDS) while it still reaches every other (the OSDs).
type cutOff struct {
	addr  string
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (n *cutOff) Listen(addr string) (net.Listener, error) { return wire.TCP{}.Listen(addr) }

func (n *cutOff) Dial(ctx context.Context, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr == n.addr && n.cut {
		return nil, syscall.ECONNREFUSED
	}
	c, err := wire.TCP{}.Dial(ctx, addr)
	if err == nil && addr == n.addr {
		n.conns = append(n.conns, c)
	}
	return c, err
}

func (n *cutOff) set(cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = cut
	if cut {
		for _, c := range n.conns {
			_ = c.Close()
		}
		n.conns = nil
	}
}

// A client cut off from the MDS for longer than the lock lease loses its
// locks there, and another writer gets them. Once it is back it must not
// trust them: its next write asks again and adopts the other's size,
// instead of reading the stripe with its old view and writing zeros over
// the other's bytes (found by review: 100 of B's bytes zeroed).
func TestLapsedLocksAreNotTrusted(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	nw := &cutOff{addr: c.MDS.Addr()}
	a := c.DialWith(func(o *braid.Options) { o.Network, o.IOTimeout = nw, 2*time.Second })
	b := c.Dial()
	const spec = "ec:2+1,unit=16KiB"
	createEmpty(t, b, "/l", spec)
	fa, err := a.OpenFile(ctx, "/l", true)
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.Repeat([]byte("a"), 100)
	if _, err := fa.WriteAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	epoch := braid.LockEpoch(a)
	nw.set(true)
	// B's write waits until the MDS gave up on A's session (a lease).
	fb, err := b.OpenFile(ctx, "/l", true)
	if err != nil {
		t.Fatal(err)
	}
	tail := bytes.Repeat([]byte("b"), 20_000)
	if _, err := fb.WriteAt(tail, 100); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	nw.set(false)
	deadline := time.Now().Add(30 * time.Second)
	// A's session is heard from again, anew, and renewed: without the fix
	// A then trusts its old locks.
	for braid.LockEpoch(a) == epoch || !braid.LockSessionValid(a) {
		if time.Now().After(deadline) {
			t.Fatal("client A never renewed its lock session")
		}
		<-time.After(10 * time.Millisecond)
	}
	if _, err := fa.WriteAt([]byte("A"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte("A"), head[1:]...), tail...)
	mustRead(t, b, "/l", "after a writer that lost its locks wrote again", want)
}

// A truncation whose lock grant lowers the handle's view of the size
// (another handle truncated the file meanwhile) locks from the lower
// end, not from where its old view put it: cutting the objects from the
// new end must not reach stripes another writer holds (found by review:
// a writer's committed-to-be bytes cut to nothing).
func TestTruncateLocksFromTheSizeItFinds(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	const spec, S = "ec:2+1,unit=16KiB", 32 << 10
	a, b, w := c.Dial(), c.Dial(), c.Dial()
	createEmpty(t, a, "/t", spec)
	fa, err := a.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt(bytes.Repeat([]byte("a"), 10*S), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Sync(); err != nil {
		t.Fatal(err)
	}
	fb, err := b.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := fb.Truncate(0); err != nil { // B holds every stripe now
		t.Fatal(err)
	}
	fw, err := w.OpenFile(ctx, "/t", true)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("w"), 4*S)
	if _, err := fw.WriteAt(data, 0); err != nil { // W gets stripes 0-3 from B
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fa.Truncate(6 * S); err != nil { // A's view: 10 stripes, of before B's truncation
		t.Fatal(err)
	}
	for _, f := range []*braid.File{fw, fa} {
		if err := f.Close(); err != nil && !errors.Is(err, braid.ErrBusy) {
			t.Fatal(err)
		}
	}
	mustRead(t, a, "/t", "after a truncation that found a smaller file", append(data, make([]byte, 2*S)...))
}

// A stripe a handle filled and parked (gather.go) must not outlive the
// loss of its lock: the client cut off past its lease, another writer
// writes the stripe, and the first writes it again once back. The parked
// buffer, read before the other's write, must fail rather than land over
// it (found by review: the other's acknowledged bytes overwritten, and
// Close returned nil).
func TestParkedStripeDoesNotOutliveItsLock(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	nw := &cutOff{addr: c.MDS.Addr()}
	a := c.DialWith(func(o *braid.Options) { o.Network, o.IOTimeout = nw, 2*time.Second })
	b := c.Dial()
	const spec, S = "ec:2+1,unit=16KiB", 32 << 10
	put(t, b, "/l", spec, bytes.Repeat([]byte("."), 2*S))
	fa, err := a.OpenFile(ctx, "/l", true)
	if err != nil {
		t.Fatal(err)
	}
	wa := func(s string, off int) error { _, err := fa.WriteAt([]byte(s), int64(off)); return err }
	for _, w := range []struct {
		s   string
		off int
	}{{"x", 10}, {"y", 1000}, {"z", S + 10}} {
		if err := wa(w.s, w.off); err != nil { // stripe 0 gathered
			t.Fatal(err)
		}
	}
	epoch := braid.LockEpoch(a)
	nw.set(true)
	fb, err := b.OpenFile(ctx, "/l", true)
	if err != nil {
		t.Fatal(err)
	}
	theirs := bytes.Repeat([]byte("B"), 1000)
	if _, err := fb.WriteAt(theirs, 2000); err != nil {
		t.Fatal(err)
	}
	if err := fb.Close(); err != nil {
		t.Fatal(err)
	}
	_ = wa("w", S+20) // while cut off: may fail
	nw.set(false)
	deadline := time.Now().Add(30 * time.Second)
	for braid.LockEpoch(a) == epoch || !braid.LockSessionValid(a) {
		if time.Now().After(deadline) {
			t.Fatal("client A never renewed its lock session")
		}
		<-time.After(10 * time.Millisecond)
	}
	_ = wa("q", 20)
	cerr := fa.Close()
	got, err := get(t, b, "/l")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[2000:3000], theirs) {
		t.Fatalf("the other writer's acknowledged bytes were overwritten (A's close: %v)", cerr)
	}
	if cerr == nil {
		t.Fatal("A's close reported success for writes it lost with its locks")
	}
}
