package osd_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// stallNet dials connections that, once stalled, hold back every large
// write (a frame's data section) until closed: a peer that sends a
// request's header and stops.
type stallNet struct{}

type stallConn struct {
	net.Conn
	mu      sync.Mutex
	stalled bool
	closed  chan struct{}
	once    sync.Once
}

func (stallNet) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func (stallNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := wire.TCP{}.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, closed: make(chan struct{})}, nil
}

// stall holds back every data section written from now on.
func (c *stallConn) stall() {
	c.mu.Lock()
	c.stalled = true
	c.mu.Unlock()
}

func (c *stallConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	stalled := c.stalled
	c.mu.Unlock()
	if stalled && len(p) >= 1<<20 { // the data section: held back
		<-c.closed
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

func (c *stallConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// Forty connections announcing 16 MiB writes and sending none of it once
// stalled every writer (an 8 MB put went from 0.21 s to 27 s): the
// in-flight budget was taken before the capability was checked. Now a
// request's capability is checked first, and a forged one holds nothing.
func TestForgedRequestsHoldNoBudget(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 1})
	addr := c.OSDs[0].Addr()
	forger, _ := capability.NewKey()
	forged := forger.Issue(42, capability.Write, 1, time.Now().Add(time.Hour))
	big := make([]byte, wire.MaxDataBytes)
	var stalled []*wire.Client
	defer func() {
		for _, cl := range stalled {
			cl.Close()
		}
	}()
	for i := 0; i < 40; i++ {
		var conn *stallConn
		nw := dialed{stallNet{}, &conn}
		cl, err := wire.DialOn(context.Background(), nw, addr)
		if err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, cl)
		conn.stall()
		go func() {
			_, _, _ = cl.Call(context.Background(), osdproto.OpWrite, (&osdproto.Req{Cap: forged, Ino: 42}).Encode(osdproto.OpWrite), big, nil)
		}()
	}
	// A real writer, with a real capability, is not held behind them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	real, err := wire.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	good := c.Key.Issue(7, capability.Read|capability.Write, 1, time.Now().Add(time.Hour))
	data := bytes.Repeat([]byte("real "), 8<<20/5)
	if _, _, err := real.Call(ctx, osdproto.OpWrite, (&osdproto.Req{Cap: good, Ino: 7}).Encode(osdproto.OpWrite), data, nil); err != nil {
		t.Fatalf("a real 8 MB write behind forty stalled forged ones: %v", err)
	}
	out := make([]byte, len(data))
	if _, _, err := real.Call(ctx, osdproto.OpRead, (&osdproto.Req{Cap: good, Ino: 7, Len: uint32(len(data))}).Encode(osdproto.OpRead), nil, out); err != nil || !bytes.Equal(out, data) {
		t.Fatalf("read back: %v", err)
	}
}

// dialed is a network that hands the test the connection it dialled.
type dialed struct {
	stallNet
	conn **stallConn
}

func (d dialed) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := d.stallNet.Dial(ctx, addr)
	if err == nil {
		*d.conn = c.(*stallConn)
	}
	return c, err
}

// OSD object files were 0644 in 0755 directories: any local user read
// file data from disk. Now the OSD's directory is its owner's alone,
// and so is every file in it, an existing directory's mode included.
func TestOSDFilesAreTheOwnersAlone(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 1})
	conn, err := wire.Dial(context.Background(), c.OSDs[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	good := c.Key.Issue(5, capability.Write, 1, time.Now().Add(time.Hour))
	if _, _, err := conn.Call(context.Background(), osdproto.OpWrite, (&osdproto.Req{Cap: good, Ino: 5, Flags: osdproto.FlagSync}).Encode(osdproto.OpWrite), []byte("secret"), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(c.OSDDir(0), 0o755); err != nil { // as an older OSD left it
		t.Fatal(err)
	}
	c.RestartOSD(0)
	files := 0
	err = filepath.WalkDir(c.OSDDir(0), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if path == c.OSDDir(0) && fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", path, fi.Mode().Perm())
		}
		if !d.IsDir() {
			files++
			if fi.Mode().Perm()&0o077 != 0 {
				t.Errorf("%s: mode %v, readable by others", path, fi.Mode().Perm())
			}
		}
		return nil
	})
	if err != nil || files < 2 {
		t.Fatalf("walked %d files: %v", files, err)
	}
}

// With TLS on the data path, an OSD serves only principals of its CA, and
// files write and read back through it.
func TestDataPathTLS(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, DefaultLayout: "ec:2+1", Auth: true, DataTLS: true})
	cl := c.Dial()
	data := bytes.Repeat([]byte("over tls "), 200_000)
	testcluster.WriteFile(t, cl, "/f", braid.CreateOptions{}, data)
	r, err := cl.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([]byte, len(data))
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back over TLS: %v", err)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range st.OSDs {
		if !strings.HasPrefix(o.Addr, auth.TLSScheme) {
			t.Errorf("OSD %d announces %s, not a TLS address", o.ID, o.Addr)
		}
	}
	// A plain connection gets nothing from it.
	if conn, err := wire.Dial(ctx, c.OSDs[0].Addr()); err == nil {
		conn.Close()
		t.Error("a plain client got a welcome from a TLS OSD")
	}
}

// Labels for many files at once need the MDS's capability for the whole
// OSD: a file's capability is refused, as are entries whose lengths do
// not add up to the data; the MDS's request labels every file it names.
func TestLabelsOfManyFilesAreTheMDSsAlone(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 1, Pack: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := wire.Dial(ctx, c.OSDs[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, ino := range []uint64{7, 8} {
		fc := c.Key.Issue(ino, capability.Write, 1, time.Now().Add(time.Hour))
		if _, _, err := cl.Call(ctx, osdproto.OpWrite, (&osdproto.Req{Cap: fc, Ino: ino}).Encode(osdproto.OpWrite), []byte("data"), nil); err != nil {
			t.Fatal(err)
		}
	}
	entries := []osdproto.LabelEntry{{Ino: 7, Version: 1, Comps: []uint32{0}, Len: 5}, {Ino: 8, Version: 1, Comps: []uint32{0}, Len: 6}}
	data := []byte("seven" + "eight!")
	call := func(cap capability.Cap, ino uint64, data []byte) error {
		_, _, err := cl.Call(ctx, osdproto.OpLabels, (&osdproto.Req{Cap: cap, Ino: ino, Labels: entries}).Encode(osdproto.OpLabels), data, nil)
		return err
	}
	fileCap := c.Key.Issue(7, capability.Write, 1, time.Now().Add(time.Hour))
	if err := call(fileCap, 7, data); !errors.Is(err, wire.ErrDenied) {
		t.Fatalf("labels with a file's capability: %v, want ErrDenied", err)
	}
	whole := c.Key.Issue(0, capability.Write, 0, time.Now().Add(time.Hour))
	if err := call(whole, 0, data[:8]); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("label entries longer than the data: %v, want ErrBadRequest", err)
	}
	if err := call(whole, 0, data); err != nil {
		t.Fatal(err)
	}
	labels, _, err := c.OSDs[0].Store().ScanLabels("", 100)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]string{}
	for _, e := range labels {
		got[e.Key.Ino] = string(e.Label)
	}
	for ino, want := range map[uint64]string{7: "seven", 8: "eight!"} {
		if got[ino] != want {
			t.Errorf("object %d's label %q, want %q", ino, got[ino], want)
		}
	}
}
