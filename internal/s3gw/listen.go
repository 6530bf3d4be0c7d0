package s3gw

import (
	"bytes"
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
// one address, and a connection past a bound takes the place of one that
// costs the gateway without serving anyone. In order:
//
//  1. one that has stalled: it has sent nothing for silentGrace (a real
//     client sends its request as it connects), or its header (which a
//     real client writes at once) has paused for headStall, or the
//     gateway has waited stallGrace in one read of its body, or the body
//     came under minRequestBytesPerSec over twice that spent waiting,
//     or one write of its answer has waited stallGrace for its reader;
//  2. one idle between requests for evictAfter (waiting to read the next:
//     not while its answer is made or written), the one silent longest;
//  3. one that has sent part of a header and not the rest, the oldest
//     first;
//  4. one that has sent nothing yet, the oldest first (those not peeked
//     at go first, to be peeked at: they may have sent part of a header).
//
// Bytes that wait in the kernel, not yet read, count as sent: eviction
// peeks at them.
// A request being answered, or whose body comes at a real client's pace,
// keeps its connection. So a slowloris flood that reopens whatever is
// closed as fast as it can takes its own places: its fresh partial
// headers go before a real client's request, whose header is whole before
// it is weighed. Besides, every request's header must arrive within
// headerTimeout of its first byte, and while a request is read or its
// answer written, each read or write must move within progressTimeout
// (S3's RequestTimeout): no connection is held by a peer that trickles
// bytes, however empty the gateway is. Accept outlives EMFILE: it closes
// idle connections to free descriptors, or waits.

const (
	evictAfter            = 2 * time.Second
	silentGrace           = 100 * time.Millisecond
	stallGrace            = time.Second
	headStall             = 100 * time.Millisecond
	minRequestBytesPerSec = 16 << 10
	headerTimeout         = 10 * time.Second
	progressTimeout       = 20 * time.Second
	// bodyTimeout bounds reading one request's body as a whole; the
	// progress bound is what stops a slow one.
	bodyTimeout = 12 * time.Hour
	// maxVictimTries bounds how many candidates one eviction peeks at.
	maxVictimTries = 32
	// peekBytes is how much of a request waiting in the kernel eviction
	// looks at for its header's end: versitygw's bound on a header.
	peekBytes = 8 << 10
)

type limitListener struct {
	net.Listener
	maxConns, maxPerPeer int
	log                  *slog.Logger

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	byPeer map[string]int
	// peekBuf takes what eviction peeks at (evict.go), under mu.
	peekBuf [peekBytes]byte
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
	now := time.Now().UnixNano()
	tc := &trackedConn{Conn: conn, l: l, addr: addr, accepted: now}
	tc.last.Store(now)
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

// evict closes the connection that goes first (the order above; from
// addr, "" any) and reports whether there was one.
func (l *limitListener) evict(addr string) bool {
	l.mu.Lock()
	now := time.Now().UnixNano()
	var victim *trackedConn
	for try := 0; ; try++ {
		victim = l.pickLocked(addr, now)
		if victim == nil || victim.spoke.Load() || victim.peekedAt.Load() == now || try == maxVictimTries {
			break
		}
		// Not read yet, it may have sent its request all the same:
		// look at what waits in the kernel, and weigh it again.
		victim.peekedAt.Store(now)
		victim.peeked.Store(victim.peek(l.peekBuf[:]))
	}
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	_ = victim.Close()
	return true
}

// pickLocked is the connection that goes first at now; nil if none may
// go.
func (l *limitListener) pickLocked(addr string, now int64) *trackedConn {
	var victim *trackedConn
	var victimRank int
	var victimSince int64
	for tc := range l.conns {
		if addr != "" && tc.addr != addr {
			continue
		}
		rank, since := tc.evictRank(now)
		if rank == 0 {
			continue
		}
		if victim == nil || rank < victimRank || rank == victimRank && since < victimSince {
			victim, victimRank, victimSince = tc, rank, since
		}
	}
	return victim
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

// trackedConn notes what eviction weighs: when its peer last sent or was
// sent anything, and how the request being read is coming in. Its reads
// and writes are fasthttp's, from the connection's one goroutine.
type trackedConn struct {
	net.Conn
	l         *limitListener
	addr      string
	accepted  int64        // unix nanoseconds
	last      atomic.Int64 // unix nanoseconds of the last byte either way
	lastRead  atomic.Int64
	lastWrite atomic.Int64
	spoke     atomic.Bool // the peer sent at least one byte
	// What eviction found waiting in the kernel, not yet read, and when.
	peekedAt atomic.Int64
	peeked   atomic.Int32 // peekNothing, peekPartial or peekHeader
	// Of the request being read: when the read under way began (0: none
	// is), the time spent waiting in reads, and the bytes they brought.
	readSince  atomic.Int64
	writeSince atomic.Int64 // when the write under way began (0: none is)
	reqWaited  atomic.Int64
	reqBytes   atomic.Int64
	reqStart   atomic.Int64
	inHeader   atomic.Bool // its header's end has not been read yet
	headerTail []byte      // the last bytes read of the header, for an end cut between reads
	wantRead   time.Time   // the read deadline fasthttp set
	wantWrite  time.Time   // the write deadline fasthttp set
	once       sync.Once
}

// inRequest reports whether a request has been read from since the last
// answer was written to.
func (c *trackedConn) inRequest() bool {
	return c.spoke.Load() && c.lastRead.Load() > c.lastWrite.Load()
}

// evictRank places c in the order above (1 goes first; 0 is never taken)
// and says since when it has been in that state, older first.
func (c *trackedConn) evictRank(now int64) (rank int, since int64) {
	switch {
	case !c.spoke.Load():
		if c.peekedAt.Load() == now {
			switch c.peeked.Load() {
			case peekHeader:
				return 0, 0 // a whole request header waits to be read
			case peekPartial:
				if now-c.accepted >= int64(headStall) {
					return 1, c.accepted
				}
				return 3, c.accepted
			}
		}
		if now-c.accepted >= int64(silentGrace) {
			return 1, c.accepted
		}
		if c.peekedAt.Load() == now {
			return 5, c.accepted // known silent: the others are peeked at first
		}
		return 4, c.accepted
	case c.inRequest() && c.inHeader.Load():
		if now-c.lastRead.Load() >= int64(headStall) {
			return 1, c.lastRead.Load()
		}
		return 3, c.reqStart.Load()
	case c.inRequest():
		waited := c.reqWaited.Load()
		if rs := c.readSince.Load(); rs != 0 {
			if now-rs >= int64(stallGrace) {
				return 1, c.lastRead.Load()
			}
			waited += now - rs
		}
		if waited >= int64(2*stallGrace) && float64(c.reqBytes.Load()) < time.Duration(waited).Seconds()*minRequestBytesPerSec {
			return 1, c.lastRead.Load()
		}
	case c.writeSince.Load() != 0:
		// An answer being written: its reader is slow, or gone.
		if ws := c.writeSince.Load(); ws != 0 && now-ws >= int64(stallGrace) {
			return 1, ws
		}
	case c.readSince.Load() != 0 && now-c.last.Load() >= int64(evictAfter):
		// Waiting for a next request (not an answer still being made).
		return 2, c.last.Load()
	}
	return 0, 0
}

// What peek finds waiting in the kernel.
const (
	peekNothing int32 = iota
	peekPartial       // part of a request's header
	peekHeader        // a whole header
)

// peek looks at the bytes from the peer that wait in the kernel, not yet
// read, into buf (without taking them).
func (c *trackedConn) peek(buf []byte) int32 {
	n := wire.PeekUnread(c.Conn, buf)
	switch {
	case n <= 0:
		return peekNothing
	case bytes.Contains(buf[:n], headerEnd):
		return peekHeader
	}
	return peekPartial
}

// capped is the sooner of want (zero: none) and progressTimeout from now.
func capped(want time.Time, now time.Time) time.Time {
	if by := now.Add(progressTimeout); want.IsZero() || by.Before(want) {
		return by
	}
	return want
}

func (c *trackedConn) SetReadDeadline(t time.Time) error {
	c.wantRead = t
	return c.Conn.SetReadDeadline(t)
}

func (c *trackedConn) SetWriteDeadline(t time.Time) error {
	c.wantWrite = t
	return c.Conn.SetWriteDeadline(t)
}

func (c *trackedConn) SetDeadline(t time.Time) error {
	c.wantRead, c.wantWrite = t, t
	return c.Conn.SetDeadline(t)
}

func (c *trackedConn) Read(p []byte) (int, error) {
	start := time.Now()
	mid := c.inRequest()
	if mid {
		_ = c.Conn.SetReadDeadline(capped(c.wantRead, start))
	}
	c.readSince.Store(start.UnixNano())
	n, err := c.Conn.Read(p)
	c.readSince.Store(0)
	now := time.Now()
	if mid {
		_ = c.Conn.SetReadDeadline(c.wantRead)
		c.reqWaited.Add(int64(now.Sub(start)))
	} else if n > 0 {
		// The first bytes of a request: the wait for them was idle.
		c.reqWaited.Store(0)
		c.reqBytes.Store(0)
		c.reqStart.Store(now.UnixNano())
		c.inHeader.Store(true)
		c.headerTail = c.headerTail[:0]
	}
	if n > 0 && c.inHeader.Load() {
		c.scanHeader(p[:n])
	}
	if n > 0 {
		c.reqBytes.Add(int64(n))
		c.last.Store(now.UnixNano())
		c.lastRead.Store(now.UnixNano())
		c.spoke.Store(true)
	}
	return n, err
}

// headerEnd ends an HTTP/1.1 request's header.
var headerEnd = []byte("\r\n\r\n")

// scanHeader looks for the header's end in b, the next bytes read of it.
func (c *trackedConn) scanHeader(b []byte) {
	if len(c.headerTail) > 0 {
		joined := append(c.headerTail, b[:min(len(b), len(headerEnd)-1)]...)
		if bytes.Contains(joined, headerEnd) {
			c.inHeader.Store(false)
			return
		}
	}
	if bytes.Contains(b, headerEnd) {
		c.inHeader.Store(false)
		return
	}
	joined := append(c.headerTail, b...)
	c.headerTail = append(c.headerTail[:0], joined[max(0, len(joined)-(len(headerEnd)-1)):]...)
}

func (c *trackedConn) Write(p []byte) (int, error) {
	start := time.Now()
	_ = c.Conn.SetWriteDeadline(capped(c.wantWrite, start))
	c.writeSince.Store(start.UnixNano())
	n, err := c.Conn.Write(p)
	c.writeSince.Store(0)
	if n > 0 {
		now := time.Now().UnixNano()
		c.last.Store(now)
		if !bytes.HasPrefix(p, interimAnswer) {
			// A 100 Continue is no answer: the request's body follows.
			c.lastWrite.Store(now)
		}
	}
	return n, err
}

// interimAnswer starts a 100 Continue, which fasthttp writes alone.
var interimAnswer = []byte("HTTP/1.1 100 ")

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
