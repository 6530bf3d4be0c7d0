package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr)
	if err != nil {
		t.Fatalf("a real client cannot connect: %v", err)
	}
	defer c.Close()
	if meta, _, err := c.Call(ctx, 1, []byte("ping"), nil, nil); err != nil || string(meta) != "PING" {
		t.Fatalf("a real client's call: %q, %v", meta, err)
	}
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
