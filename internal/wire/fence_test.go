package wire

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/braidfs/braid/internal/simnet"
)

// recorder is a handler that records the meta of every request it ran;
// a request with meta "slow" says it started and waits for free.
type recorder struct {
	mu      sync.Mutex
	ran     []string
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newRecorder() *recorder {
	return &recorder{started: make(chan struct{}, 1), release: make(chan struct{})}
}

func (r *recorder) handle(_ context.Context, req *Request) (Response, error) {
	if string(req.Meta) == "slow" {
		r.started <- struct{}{}
		<-r.release
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ran = append(r.ran, string(req.Meta))
	return Response{}, nil
}

// free lets slow requests finish (idempotent: tests call it before
// stopping their server, which waits for its handlers).
func (r *recorder) free() { r.once.Do(func() { close(r.release) }) }

func (r *recorder) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ran)
}

// A request held in the network while its client gave up on the
// connection and sent it again, then delivered late, after a newer
// request: it must not run (it would undo the newer one).
func TestLateCopyFromAReplacedConnectionNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := simnet.New()
		nw.SplitRequests(FrameLen)
		ln, err := nw.Listen("osd:0")
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		s := NewServer(rec.handle, slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultLimits)
		go s.Serve(context.Background(), ln)
		defer s.Close()
		addr := ln.Addr().String()
		pool := NewPoolOn(nw)
		defer pool.Close()
		call := func(meta string) error {
			c, err := pool.Get(context.Background(), addr)
			if err != nil {
				return err
			}
			_, _, err = c.Call(context.Background(), 1, []byte(meta), nil, nil)
			return err
		}
		nw.Duplicate(addr, 1, 3*time.Second, 1)
		if err := call("v1"); !errors.Is(err, ErrClosed) {
			t.Fatalf("held request: %v, want ErrClosed", err)
		}
		nw.Duplicate(addr, 0, 0, 0)
		for _, m := range []string{"v1", "v2"} { // sent again, then overwritten
			if err := call(m); err != nil {
				t.Fatalf("%s: %v", m, err)
			}
		}
		<-time.After(5 * time.Second)
		synctest.Wait()
		if got := rec.log(); !slices.Equal(got, []string{"v1", "v2"}) {
			t.Fatalf("server ran %q, want [v1 v2]: the late copy of v1 ran", got)
		}
	})
}

// A newer connection of a peer waits for the requests of its older one
// that are running, and closes it: what is read from it afterwards never
// runs. A hello of an older generation is refused.
func TestNewerConnectionFencesOlder(t *testing.T) {
	rec := newRecorder()
	addr := startServer(t, rec.handle)
	defer rec.free() // before the server's Close, which waits for the handlers
	ctx := context.Background()
	id := NewPeerID()
	old, err := dialFenced(ctx, TCP{}, addr, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	slowDone := make(chan error, 1)
	go func() { _, _, err := old.Call(ctx, 1, []byte("slow"), nil, nil); slowDone <- err }()
	<-rec.started
	newer, err := dialFenced(ctx, TCP{}, addr, id, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	fastDone := make(chan error, 1)
	go func() { _, _, err := newer.Call(ctx, 1, []byte("after"), nil, nil); fastDone <- err }()
	select {
	case err := <-fastDone:
		t.Fatalf("the newer connection's request ran (%v) while the older one's was running", err)
	case <-time.After(50 * time.Millisecond):
	}
	rec.free()
	if err := <-fastDone; err != nil {
		t.Fatalf("newer connection: %v", err)
	}
	<-slowDone // its reply may or may not make it: the connection is closed
	if _, _, err := old.Call(ctx, 1, []byte("stale"), nil, nil); err == nil {
		t.Fatal("a request on the fenced connection was answered")
	}
	older, err := dialFenced(ctx, TCP{}, addr, id, 1)
	if err == nil {
		_, _, err = older.Call(ctx, 1, []byte("older"), nil, nil)
		older.Close()
	}
	if err == nil {
		t.Fatal("a connection of an older generation was served")
	}
	if ran := rec.log(); !slices.Equal(ran, []string{"slow", "after"}) {
		t.Fatalf("server ran %q, want [slow after]", ran)
	}
}

// A request already read from a connection when a newer one of its peer
// fenced it never runs: here it waits behind a slow one for the
// connection's only slot while the newer connection says hello. A second
// connection of the newest generation (a late copy of its hello) waits
// for the older requests too.
func TestFencedConnectionRunsNothingMore(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	s := NewServer(rec.handle, slog.New(slog.NewTextHandler(io.Discard, nil)), Limits{MaxInflightPerConn: 1, MaxInflightBytes: 1 << 20})
	go s.Serve(context.Background(), ln)
	defer s.Close()
	defer rec.free() // before Close, which waits for the handlers
	addr := ln.Addr().String()
	id := NewPeerID()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var stream []byte
	stream = AppendFrame(stream, Header{Kind: KindRequest, Op: OpHello}, helloMeta(id, 1), nil)
	stream = AppendFrame(stream, Header{Kind: KindRequest, Op: 1, ID: 1}, []byte("slow"), nil)
	stream = AppendFrame(stream, Header{Kind: KindRequest, Op: 1, ID: 2}, []byte("queued"), nil)
	if _, err := raw.Write(stream); err != nil {
		t.Fatal(err)
	}
	<-rec.started
	ctx := context.Background()
	newer := make(chan error, 2)
	for _, meta := range []string{"newer", "same generation"} {
		go func() {
			c, err := dialFenced(ctx, TCP{}, addr, id, 2)
			if err == nil {
				_, _, err = c.Call(ctx, 1, []byte(meta), nil, nil)
				c.Close()
			}
			newer <- err
		}()
	}
	select {
	case err := <-newer:
		t.Fatalf("a newer connection's request ran (%v) while an older one's was running", err)
	case <-time.After(50 * time.Millisecond):
	}
	rec.free()
	for range 2 {
		if err := <-newer; err != nil {
			t.Fatalf("newer connection: %v", err)
		}
	}
	if ran := rec.log(); len(ran) != 3 || ran[0] != "slow" || slices.Contains(ran, "queued") {
		t.Fatalf("server ran %q, want slow, then the two newer requests, never the queued one", ran)
	}
}

// Malformed hellos close their connection; the server goes on serving.
func TestMalformedHellos(t *testing.T) {
	addr := startServer(t, echo)
	hello := func(meta, data []byte) []byte {
		return AppendFrame(nil, Header{Kind: KindRequest, Op: OpHello}, meta, data)
	}
	req := AppendFrame(nil, Header{Kind: KindRequest, Op: 1, ID: 1}, []byte("x"), nil)
	for name, stream := range map[string][]byte{
		"short":       hello([]byte{1, 2, 3}, nil),
		"zero peer":   hello(helloMeta(0, 1), nil),
		"zero gen":    hello(helloMeta(1, 0), nil),
		"with data":   hello(helloMeta(1, 1), []byte("data")),
		"not first":   append(slices.Clone(req), hello(helloMeta(2, 1), nil)...),
		"hello twice": append(hello(helloMeta(3, 1), nil), hello(helloMeta(3, 2), nil)...),
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write(stream); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = io.ReadAll(conn)
		conn.Close()
		if err != nil {
			t.Fatalf("%s: the server kept the connection: %v", name, err)
		}
	}
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Call(context.Background(), 1, []byte("ok"), nil, nil); err != nil {
		t.Fatalf("server stopped serving: %v", err)
	}
}

// BenchmarkSmallCalls: small calls from 16 goroutines over one fenced
// loopback connection (a Pool's): what a request costs with fencing.
func BenchmarkSmallCalls(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := NewServer(echo, slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultLimits)
	go s.Serve(context.Background(), ln)
	defer s.Close()
	c, err := NewPool().Get(context.Background(), ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.SetParallelism(8) // 16 goroutines on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, err := c.Call(context.Background(), 1, []byte("m"), nil, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// A closed pool dials nothing more: a request its owner started before
// closing it (a read-ahead, say) fails at once with ErrPoolClosed instead
// of opening a connection that outlives the owner, and one that was open
// is closed.
func TestClosedPoolDialsNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := NewServer(newRecorder().handle, slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultLimits)
	go s.Serve(context.Background(), ln)
	defer s.Close()
	pool := NewPool()
	c, err := pool.Get(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if c.Err() == nil {
		t.Fatal("a connection of a closed pool is still open")
	}
	if _, err := pool.Get(context.Background(), ln.Addr().String()); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("Get on a closed pool: %v, want ErrPoolClosed", err)
	}
	if errors.Is(ErrPoolClosed, ErrClosed) {
		t.Fatal("ErrPoolClosed is ErrClosed: callers would retry it")
	}
}

// A hello of an older generation is refused while a newer one of its
// peer arrives: the refusal reads the peer's newest generation under the
// server's lock (it read it after unlocking, a data race the race
// detector found in the simulation).
func TestOlderHelloRefusedWhileANewerArrives(t *testing.T) {
	f := newFences()
	conn := func() *serverConn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return &serverConn{conn: a}
	}
	const peerID = 7
	if err := f.hello(conn(), peerID, 2); err != nil {
		t.Fatal(err)
	}
	for gen := uint64(3); gen < 200; gen++ {
		var wg sync.WaitGroup
		var older error
		wg.Add(2)
		go func() { defer wg.Done(); older = f.hello(conn(), peerID, 1) }()
		go func() { defer wg.Done(); _ = f.hello(conn(), peerID, gen) }()
		wg.Wait()
		if !errors.Is(older, ErrFrame) {
			t.Fatalf("a hello of generation 1 after %d: %v, want refused", gen, older)
		}
	}
}
