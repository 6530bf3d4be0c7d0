package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func startLimited(t *testing.T, h Handler, l Limits) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(h, slog.New(slog.NewTextHandler(io.Discard, nil)), l)
	go s.Serve(context.Background(), ln)
	t.Cleanup(s.Close)
	return s, ln.Addr().String()
}

// eventually polls cond, every 10 ms, until it holds or 20 s have passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("not within 20 s: %s", what)
		case <-tick.C:
		}
	}
}

func callEcho(t *testing.T, addr string) {
	t.Helper()
	if err := tryEcho(addr); err != nil {
		t.Fatal(err)
	}
}

// tryEcho is a real client's call, or why it failed.
func tryEcho(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("a real client cannot connect: %w", err)
	}
	defer c.Close()
	if meta, _, err := c.Call(ctx, 1, []byte("ping"), nil, nil); err != nil || string(meta) != "PING" {
		return fmt.Errorf("a real client's call: %q, %w", meta, err)
	}
	return nil
}

// Thousands of idle sockets once made a server deaf for good; now they
// take the places of each other, and real clients get in.
func TestIdleFloodDoesNotDeafenServer(t *testing.T) {
	s, addr := startLimited(t, echo, Limits{MaxConns: 32, MaxConnsPerPeer: 32})
	// A real client connected before the flood keeps working through it
	// (its pooled connection may be the one evicted: it redials).
	pool := NewPool()
	defer pool.Close()
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for attempt := 0; ; attempt++ {
			c, err := pool.Get(ctx, addr)
			if err != nil {
				return err
			}
			meta, _, err := c.Call(ctx, 1, []byte("ping"), nil, nil)
			if errors.Is(err, ErrClosed) && attempt < 3 {
				continue
			}
			if err == nil && string(meta) != "PING" {
				err = fmt.Errorf("answer %q", meta)
			}
			return err
		}
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
		if i%50 == 49 {
			if err := call(); err != nil {
				t.Fatalf("after %d idle sockets: %v", i+1, err)
			}
			callEcho(t, addr)
		}
	}
	// The evicted ones go as their goroutines see their sockets closed.
	eventually(t, "at most 32 connections held", func() bool { return s.Conns() <= 32 })
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	pool.Close()
	eventually(t, "connections released", func() bool { return s.Conns() == 0 })
}

// Busy connections are never evicted: a new one past the bound is refused
// instead, and the busy ones finish.
func TestBusyConnectionsAreNotEvicted(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	slow := func(ctx context.Context, r *Request) (Response, error) {
		started.Add(1)
		<-release
		return Response{Meta: []byte("done")}, nil
	}
	_, addr := startLimited(t, slow, Limits{MaxConns: 4, MaxConnsPerPeer: 4})
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		c, err := Dial(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go func() {
			_, _, err := c.Call(context.Background(), 1, nil, nil, nil)
			errs <- err
		}()
	}
	eventually(t, "four requests running", func() bool { return started.Load() == 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := Dial(ctx, addr); err == nil {
		c.Close()
		t.Fatal("a fifth connection was served past the bound of four busy ones")
	}
	close(release)
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("a busy connection's request: %v", err)
		}
	}
}

func TestSilentConnectionsTimeOut(t *testing.T) {
	s, addr := startLimited(t, echo, Limits{IdleTimeout: 200 * time.Millisecond, HelloTimeout: 200 * time.Millisecond})
	raw, err := net.Dial("tcp", addr) // never says hello
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	c, err := Dial(context.Background(), addr) // says hello, then nothing
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = raw.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection without a hello was not closed: %v", err)
	}
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		t.Fatal("an idle connection was not closed")
	}
	eventually(t, "connections released", func() bool { return s.Conns() == 0 })
	callEcho(t, addr)
}

// A connection with a request running (a long poll) is not idle.
func TestLongPollIsNotIdle(t *testing.T) {
	poll := func(ctx context.Context, r *Request) (Response, error) {
		// A long poll ends on its own timer (as CacheWait does), here
		// six idle timeouts after it began.
		select {
		case <-time.After(600 * time.Millisecond):
		case <-ctx.Done():
			return Response{}, ctx.Err()
		}
		return Response{Meta: []byte("woke")}, nil
	}
	_, addr := startLimited(t, poll, Limits{IdleTimeout: 100 * time.Millisecond})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if meta, _, err := c.Call(context.Background(), 1, nil, nil, nil); err != nil || string(meta) != "woke" {
		t.Fatalf("long poll: %q, %v", meta, err)
	}
}

// flakyListener fails its first accepts as a process out of descriptors
// does.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// An accept loop used to return on EMFILE and serve no one again.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	fl.fails.Store(8) // several backoff rounds
	s := NewServer(echo, slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultLimits)
	served := make(chan error, 1)
	go func() { served <- s.Serve(context.Background(), fl) }()
	t.Cleanup(s.Close)
	callEcho(t, ln.Addr().String())
	select {
	case err := <-served:
		t.Fatalf("Serve returned %v", err)
	default:
	}
}

// partialFrame opens a connection that sends the first 20 bytes of a
// frame header and nothing more; welcomed, it says a real hello first
// (an OSD without data TLS welcomes anyone, an MDS anyone with a
// credential).
func partialFrame(addr string, welcomed bool) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (net.Conn, error) {
		c.Close()
		return nil, err
	}
	var hb [headerBytes]byte
	if welcomed {
		hello := Hello{Peer: NewPeerID(), Gen: 1, MinVersion: MinProtocolVersion, MaxVersion: ProtocolVersion}.encode()
		Header{Kind: KindRequest, Op: OpHello, MetaLen: uint32(len(hello))}.put(hb[:], hello)
		if _, err := c.Write(append(hb[:], hello...)); err != nil {
			return fail(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, hb[:]); err != nil {
			return fail(fmt.Errorf("no welcome: %w", err))
		}
		h, err := parseHeader(hb[:])
		if err == nil && h.Status != OK {
			err = h.Status
		}
		if err != nil {
			return fail(err)
		}
		if _, err := io.ReadFull(c, make([]byte, h.MetaLen)); err != nil {
			return fail(fmt.Errorf("no welcome: %w", err))
		}
		_ = c.SetReadDeadline(time.Time{})
	}
	meta := []byte("never finished")
	Header{Kind: KindRequest, Op: 1, ID: 7, MetaLen: uint32(len(meta))}.put(hb[:], meta)
	if _, err := c.Write(hb[:20]); err != nil {
		return fail(err)
	}
	return c, nil
}

// Connections that sent part of a frame counted as busy and were never
// evicted: a flood of them (unwelcomed, and welcomed as anyone may be on
// an OSD without data TLS) made a server refuse everyone for the 30 s a
// frame may take. Now a real client gets in at its first try.
func TestPartialFrameFloodDoesNotDeafenServer(t *testing.T) {
	for _, welcomed := range []bool{false, true} {
		t.Run(fmt.Sprintf("welcomed=%v", welcomed), func(t *testing.T) {
			s, addr := startLimited(t, echo, Limits{MaxConns: 16, MaxConnsPerPeer: 16})
			var flood []net.Conn
			defer func() {
				for _, c := range flood {
					c.Close()
				}
			}()
			for i := 0; i < 48; i++ {
				c, err := partialFrame(addr, welcomed)
				if err != nil {
					continue // refused: every place holds a fresh partial frame
				}
				flood = append(flood, c)
			}
			eventually(t, "the flood holds every place", func() bool { return s.Conns() >= 16 })
			for i := 0; i < 8; i++ {
				if err := tryEcho(addr); err != nil {
					t.Fatalf("real client %d through the flood: %v", i, err)
				}
			}
		})
	}
}

// A partial hello was held for the 30 s any frame may take: a new
// connection has HelloTimeout for its TLS handshake and hello together.
func TestPartialHelloClosedAtHelloTimeout(t *testing.T) {
	_, addr := startLimited(t, echo, Limits{HelloTimeout: 300 * time.Millisecond})
	c, err := partialFrame(addr, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		t.Fatalf("the partial hello's connection: %v after %d bytes", err, n)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("a partial hello was held %v past a hello timeout of 300ms", waited)
	}
}

// A full server that turns a connection away says so: the client used to
// report "a server older than braid protocol 2".
func TestRefusedConnectionSaysServerFull(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var started atomic.Int32
	slow := func(ctx context.Context, r *Request) (Response, error) {
		started.Add(1)
		<-release
		return Response{}, nil
	}
	_, addr := startLimited(t, slow, Limits{MaxConns: 1, MaxConnsPerPeer: 1})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Call(context.Background(), 1, nil, nil, nil)
	eventually(t, "a request running", func() bool { return started.Load() == 1 })
	_, err = Dial(context.Background(), addr)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("a connection past the bound of busy ones: %v, want ErrBusy", err)
	}
}

// A frame announcing a megabyte of meta made the server allocate it
// before a byte of it arrived: thousands of such connections, each
// sending only a header, held gigabytes. A first frame larger than a
// hello is refused unread; later ones take in-flight budget first, so
// what all of them hold is bounded by the server's budget.
func TestAnnouncedMetaIsNotAllocatedBeforeItIsBudgeted(t *testing.T) {
	s, addr := startLimited(t, echo, Limits{MaxInflightBytes: 24 << 20})
	// Unwelcomed: refused at once, with why.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hb [headerBytes]byte
	Header{Kind: KindRequest, Op: OpHello, MetaLen: MaxMetaBytes}.put(hb[:], nil)
	if _, err := c.Write(hb[:]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatalf("a 1 MiB hello was not answered: %v", err)
	}
	if h, err := parseHeader(hb[:]); err != nil || h.Status != ErrProtocol {
		t.Fatalf("a 1 MiB hello: %+v %v; want ErrProtocol", h, err)
	}
	// Welcomed: each big meta takes budget; a real client's small
	// request never waits for it.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < 200; i++ {
		c, err := partialFrame(addr, true)
		if err != nil {
			t.Fatal(err)
		}
		// The rest of a header announcing 1 MiB of meta, and none of it.
		var full [headerBytes]byte
		Header{Kind: KindRequest, Op: 1, ID: 7, MetaLen: MaxMetaBytes}.put(full[:], nil)
		if _, err := c.Write(full[20:]); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Every header read (the server answers the next connection's hello
	// only after it took the previous ones), the heap holds the budget's
	// worth of meta buffers, not 200 MiB.
	callEcho(t, addr)
	eventually(t, "every announced meta waiting or held", func() bool { return s.Conns() >= 200 })
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Fatalf("200 connections announcing 1 MiB of meta each grew the heap by %d MiB", grew>>20)
	}
	callEcho(t, addr)
}
