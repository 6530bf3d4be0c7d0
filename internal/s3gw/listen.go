package s3gw

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/versity/versitygw/s3api"

	"github.com/braidfs/braid/internal/wire"
)

// The gateway's listener bounds its connections the way braid's own
// servers do (internal/wire/admit.go): at most maxConns, maxPerPeer from
// one address, and a connection past a bound takes the place of an idle
// one (one that never sent a byte first, then the one silent longest),
// so 1,024 idle sockets, which made the gateway answer 503 to everyone,
// now cost real clients nothing. A connection is idle enough to evict once
// silent for evictAfter after an answer (a request still being answered,
// bytes read since the last written, keeps its connection for up to
// slowRequest), or silentGrace if it never sent a byte (a real client
// sends its request as soon as it connects). Accept outlives EMFILE: it
// closes idle connections to free descriptors, or waits.

const (
	evictAfter  = 2 * time.Second
	silentGrace = 100 * time.Millisecond
	slowRequest = time.Minute
)

type limitListener struct {
	net.Listener
	maxConns, maxPerPeer int
	log                  *slog.Logger

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	byPeer map[string]int
}

func newLimitListener(ln net.Listener, maxConns, maxPerPeer int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, maxConns: maxConns, maxPerPeer: maxPerPeer, log: log,
		conns: map[*trackedConn]struct{}{}, byPeer: map[string]int{}}
}

// Accept returns the next admitted connection. It never returns a
// transient error: the HTTP server would stop serving on one.
func (l *limitListener) Accept() (net.Conn, error) {
	var backoff wire.AcceptBackoff
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			if (errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)) && l.evict("") {
				continue
			}
			// A listener closed meanwhile says so at the next Accept.
			backoff.Wait(context.Background(), l.log, err)
			continue
		}
		backoff.Reset()
		if tc := l.admit(conn); tc != nil {
			return tc, nil
		}
	}
}

func (l *limitListener) admit(conn net.Conn) *trackedConn {
	addr := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	peerFull, full := l.full(addr)
	if peerFull && !l.evict(addr) || full && !l.evict("") {
		_ = conn.Close()
		return nil
	}
	tc := &trackedConn{Conn: conn, l: l, addr: addr}
	tc.last.Store(time.Now().UnixNano())
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.byPeer[addr]++
	l.mu.Unlock()
	return tc
}

// full reports whether addr and the listener are at their bounds.
func (l *limitListener) full(addr string) (peer, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byPeer[addr] >= l.maxPerPeer, len(l.conns) >= l.maxConns
}

// evict closes the idle connection that goes first (from addr; "" any)
// and reports whether there was one.
func (l *limitListener) evict(addr string) bool {
	l.mu.Lock()
	now := time.Now().UnixNano()
	var victim *trackedConn
	for tc := range l.conns {
		if (addr != "" && tc.addr != addr) || now-tc.last.Load() < int64(tc.grace()) {
			continue
		}
		if victim == nil || tc.spoke.Load() != victim.spoke.Load() && !tc.spoke.Load() ||
			tc.spoke.Load() == victim.spoke.Load() && tc.last.Load() < victim.last.Load() {
			victim = tc
		}
	}
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

func (l *limitListener) forget(tc *trackedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[tc]; !ok {
		return
	}
	delete(l.conns, tc)
	if l.byPeer[tc.addr]--; l.byPeer[tc.addr] <= 0 {
		delete(l.byPeer, tc.addr)
	}
}

// trackedConn notes when its peer last sent or was sent anything.
type trackedConn struct {
	net.Conn
	l         *limitListener
	addr      string
	last      atomic.Int64 // unix nanoseconds of the last byte either way
	lastRead  atomic.Int64
	lastWrite atomic.Int64
	spoke     atomic.Bool // the peer sent at least one byte
	once      sync.Once
}

// grace is how long c must be silent to be evicted.
func (c *trackedConn) grace() time.Duration {
	switch {
	case !c.spoke.Load():
		return silentGrace
	case c.lastRead.Load() > c.lastWrite.Load():
		return slowRequest // a request not answered yet
	}
	return evictAfter
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		now := time.Now().UnixNano()
		c.last.Store(now)
		c.lastRead.Store(now)
		c.spoke.Store(true)
	}
	return n, err
}

func (c *trackedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		now := time.Now().UnixNano()
		c.last.Store(now)
		c.lastWrite.Store(now)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}

// fiberApp is the HTTP server inside versitygw's S3 server, so that the
// gateway can serve it on its own listener: versitygw takes only
// addresses and binds them itself (ServeMultiPort), with no bound on
// idle connections. A versitygw that moves the field fails Start, and
// its test, rather than serving unbounded.
func fiberApp(api *s3api.S3ApiServer) (*fiber.App, error) {
	f := reflect.ValueOf(api).Elem().FieldByName("app")
	if !f.IsValid() || f.Type() != reflect.TypeOf((*fiber.App)(nil)) || f.IsNil() {
		return nil, errors.New("s3 gateway: versitygw's S3ApiServer keeps no *fiber.App in its field app; update internal/s3gw/listen.go")
	}
	return (*fiber.App)(f.UnsafePointer()), nil
}
