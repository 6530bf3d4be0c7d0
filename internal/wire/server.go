package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Request is one decoded request handed to a Handler. Data is pooled: it
// is valid only until the handler returns.
type Request struct {
	Op   uint16
	Meta []byte
	Data []byte
	// Admitted is what the server's Admit made of Meta (a decoded,
	// verified request), so the handler need not do it again.
	Admitted any
}

// Response is a handler's answer. If Release is set it is called once the
// response has been written, to recycle Data.
type Response struct {
	Meta    []byte
	Data    []byte
	Release func()
}

// Handler serves one request. A returned error is sent as a status code
// (CodeOf) with its text; the response is then ignored.
type Handler func(ctx context.Context, req *Request) (Response, error)

// Limits bound what a server holds for its peers. Zero fields take the
// defaults below.
type Limits struct {
	MaxInflightPerConn int   // requests handled at once on one connection
	MaxInflightBytes   int64 // request data held across all connections
	// MaxConnInflightBytes is the request data one connection may hold:
	// a peer that announces large requests and sends them slowly stalls
	// itself, not everyone. 0: MaxInflightBytes/8.
	MaxConnInflightBytes int64
	// MaxConns and MaxConnsPerPeer bound the connections served at once,
	// in all and from one IP address. A connection past either bound
	// takes the place of an idle one among those it counts against; if
	// none is idle, it is closed (admit.go). 0: 4096 (or half the
	// descriptor limit) and 1024.
	MaxConns        int
	MaxConnsPerPeer int
	// IdleTimeout closes a connection with nothing in flight that sent
	// nothing for this long (0: 10 minutes); HelloTimeout one that has
	// not completed its TLS handshake and hello this long after it was
	// accepted (0: 10 s).
	IdleTimeout  time.Duration
	HelloTimeout time.Duration
	// StallGrace is how long a frame may pause, or crawl below
	// minFrameBytesPerSec, before its connection may be evicted to make
	// room (admit.go); 0: 1 s. A real client sends a frame's header and
	// meta in one write.
	StallGrace time.Duration
}

// DefaultLimits suit an OSD on a small machine.
var DefaultLimits = Limits{MaxInflightPerConn: 64, MaxInflightBytes: 512 << 20}

func (l Limits) withDefaults() Limits {
	if l.MaxInflightPerConn <= 0 {
		l.MaxInflightPerConn = 64
	}
	if l.MaxInflightBytes <= 0 {
		l.MaxInflightBytes = 512 << 20
	}
	if l.MaxConnInflightBytes <= 0 {
		l.MaxConnInflightBytes = max(l.MaxInflightBytes/8, MaxDataBytes+1)
	}
	if l.MaxConns <= 0 {
		l.MaxConns = defaultMaxConns()
	}
	if l.MaxConnsPerPeer <= 0 {
		l.MaxConnsPerPeer = 1024
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 10 * time.Minute
	}
	if l.HelloTimeout <= 0 {
		l.HelloTimeout = handshakeTimeout
	}
	if l.StallGrace <= 0 {
		l.StallGrace = time.Second
	}
	return l
}

// Server accepts connections and serves framed requests on them.
type Server struct {
	handler  Handler
	log      *slog.Logger
	limits   Limits
	inflight *semaphore.Weighted
	// metaBudget bounds the large meta sections held (holdMeta).
	metaBudget *semaphore.Weighted
	fences     *fences
	role       string   // announced in the handshake
	features   Features // offered in the handshake

	// admit, if set, checks a request's meta (its capability) before its
	// data is read or counted against the in-flight budget.
	admit func(op uint16, meta []byte) (any, error)

	mu      sync.Mutex
	conns   map[*serverConn]struct{}
	byPeer  map[string]int // connections counted per remote IP (admit.go)
	counted int            // connections counted against MaxConns
	// refusing counts refusals being answered (admit.go).
	refusing int
	// peekBuf takes what eviction peeks at (admit.go), under mu.
	peekBuf [peekBytes]byte
	lns     []net.Listener
	wg      sync.WaitGroup
	// closed is set by Close; a Serve that starts or accepts afterwards
	// closes what it holds instead of serving it.
	closed bool
}

// NewServer returns a server that dispatches to h.
func NewServer(h Handler, log *slog.Logger, limits Limits) *Server {
	limits = limits.withDefaults()
	return &Server{handler: h, log: log, limits: limits,
		inflight: semaphore.NewWeighted(limits.MaxInflightBytes), metaBudget: semaphore.NewWeighted(max(limits.MaxInflightBytes/8, MaxMetaBytes)), fences: newFences(),
		conns: map[*serverConn]struct{}{}, byPeer: map[string]int{}}
}

// Admit makes the server check each request's meta with fn before
// reading its data: a request fn refuses is answered with fn's error and
// its data skipped, never held. Call it before Serve.
func (s *Server) Admit(fn func(op uint16, meta []byte) (any, error)) { s.admit = fn }

// Identify sets what the server announces in the handshake: its role
// (RoleMDS, RoleOSD) and the features it has. Call it before Serve.
func (s *Server) Identify(role string, features Features) {
	s.role, s.features = role, features
}

// Serve accepts on ln until it is closed.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var backoff AcceptBackoff
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of descriptors (EMFILE, ENFILE) or memory, or a
			// connection reset before it was taken: none is the
			// listener's end. Wait a little and go on serving.
			if s.shedForDescriptors(err) {
				continue // a descriptor is free again: take the next at once
			}
			if !backoff.Wait(ctx, s.log, err) {
				return nil
			}
			continue
		}
		backoff.Reset()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		sc, ok := s.register(conn)
		if !ok {
			return nil
		}
		if sc == nil {
			continue // refused: the server is full of busy connections
		}
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, sc)
		}()
	}
}

// Close stops the listeners and every connection and waits for handlers.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	for sc := range s.conns {
		sc.closeRaw()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

type connDoneKey struct{}

// ConnDone is closed once the connection a request came on has closed
// (nil outside a handler). A handler that waits long (a long poll) ends
// with it: the connection's peer has gone, or fenced it (fence.go) and
// waits for its requests to finish.
func ConnDone(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(connDoneKey{}).(chan struct{})
	return ch
}

type peerTLSKey struct{}

// PeerTLS is the TLS state of the connection a request came on: its
// peer's verified certificates. Nil on a connection without TLS.
func PeerTLS(ctx context.Context) *tls.ConnectionState {
	cs, _ := ctx.Value(peerTLSKey{}).(*tls.ConnectionState)
	return cs
}

// tlsHandshake runs a TLS server's handshake, bounded by wait, and notes
// its outcome in the context. A peer that fails it has sent nothing the
// server read.
func tlsHandshake(ctx context.Context, tc *tls.Conn, wait time.Duration) (context.Context, error) {
	hctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return ctx, fmt.Errorf("%w: tls handshake: %v", ErrDenied, err)
	}
	cs := tc.ConnectionState()
	return context.WithValue(ctx, peerTLSKey{}, &cs), nil
}

type serverConn struct {
	s    *Server
	conn net.Conn
	wmu  sync.Mutex
	hbuf [headerBytes]byte
	sem  chan struct{}
	wg   sync.WaitGroup
	// held bounds the request data this connection holds at once.
	held *semaphore.Weighted

	peer *peer  // nil: anonymous (no hello), never fenced
	gen  uint64 // the connection's generation, from its hello

	addr     string    // the peer's IP address (admit.go)
	accepted time.Time // when the connection was taken
	welcomed atomic.Bool
	evicted  bool // no longer counted (closed to make room, or ended); guarded by Server.mu

	// What eviction weighs (admit.go), in unix nanoseconds and bytes.
	phase      atomic.Int32 // phaseBetween, phaseHead, phaseServer or phaseData
	lastByte   atomic.Int64 // the last byte read from the peer
	bytesRead  atomic.Int64 // bytes read from the peer so far
	frameStart atomic.Int64 // when the frame being read started (or resumed after a wait for budget)
	frameBytes atomic.Int64 // bytesRead then
	lastAnswer atomic.Int64 // when its last answer was written: idle is counted from then too
	peekedAt   atomic.Int64 // when eviction last peeked at what waits unread (admit.go)
	peeked     atomic.Int32 // and what it found
}

// The phases of a connection's read loop.
const (
	phaseBetween int32 = iota // waiting for a frame's first byte
	phaseHead                 // reading a frame's header and meta
	phaseServer               // the server's turn: a frame read whole, or waiting for the in-flight budget
	phaseData                 // reading a frame's data
)

// connReader notes each read's bytes and time for eviction.
type connReader struct{ sc *serverConn }

func (r connReader) Read(p []byte) (int, error) {
	n, err := r.sc.conn.Read(p)
	if n > 0 {
		r.sc.bytesRead.Add(int64(n))
		r.sc.lastByte.Store(time.Now().UnixNano())
	}
	return n, err
}

// startPhase notes that part of a frame is being read from now on.
func (sc *serverConn) startPhase(phase int32) {
	sc.frameBytes.Store(sc.bytesRead.Load())
	sc.frameStart.Store(time.Now().UnixNano())
	sc.phase.Store(phase)
}

func (s *Server) serveConn(ctx context.Context, sc *serverConn) {
	conn := sc.conn
	done := make(chan struct{})
	ctx = context.WithValue(ctx, connDoneKey{}, done)
	var err error
	if tc, ok := conn.(*tls.Conn); ok {
		ctx, err = tlsHandshake(ctx, tc, time.Until(sc.accepted.Add(s.limits.HelloTimeout)))
	}
	if err == nil {
		err = sc.readLoop(ctx)
	}
	switch {
	case err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, errIdle):
	case errors.Is(err, ErrDenied):
		s.log.Info("connection refused", "peer", conn.RemoteAddr().String(), "err", err)
	default:
		s.log.Warn("closing connection", "peer", conn.RemoteAddr().String(), "err", err)
	}
	_ = conn.Close()
	close(done)
	sc.wg.Wait()
	s.fences.detach(sc)
	s.unregister(sc)
}

func (sc *serverConn) readLoop(ctx context.Context) error {
	br := bufio.NewReaderSize(connReader{sc}, readBufferBytes)
	var hb [headerBytes]byte
	for first := true; ; first = false {
		sc.phase.Store(phaseBetween)
		if err := sc.awaitFrame(br, first); err != nil {
			return err
		}
		sc.startPhase(phaseHead)
		// The hello is bounded from the connection's accept, any other
		// frame's header and meta from its first byte.
		headBy := time.Now().Add(frameHeadTimeout)
		if first {
			headBy = sc.accepted.Add(sc.s.limits.HelloTimeout)
		}
		_ = sc.conn.SetReadDeadline(headBy)
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return err
		}
		h, err := parseHeader(hb[:])
		if err != nil {
			return err
		}
		if h.Kind != KindRequest {
			return fmt.Errorf("%w: response on a server connection", ErrFrame)
		}
		if first && h.MetaLen > maxHelloMetaBytes {
			// Before the handshake no one is known: a first frame
			// bigger than any hello is not read, let alone held.
			err := Errorf(ErrProtocol, "a first frame with %d bytes of meta: a hello has at most %d", h.MetaLen, maxHelloMetaBytes)
			_ = sc.write(Header{Kind: KindResponse, Op: h.Op, ID: h.ID, Status: CodeOf(err)}, []byte(err.Error()), nil)
			return err
		}
		metaHeld, err := sc.holdMeta(ctx, h.MetaLen)
		if err != nil {
			return err
		}
		meta := make([]byte, h.MetaLen)
		if _, err := io.ReadFull(br, meta); err != nil {
			sc.unholdMeta(metaHeld)
			return err
		}
		if err := checkHeaderCRC(hb[:], meta); err != nil {
			sc.unholdMeta(metaHeld)
			return err
		}
		sc.phase.Store(phaseServer)
		if first || h.Op == OpHello {
			sc.unholdMeta(metaHeld)
			if err := sc.hello(first, h, meta); err != nil {
				return err
			}
			continue
		}
		var admitted any
		if sc.s.admit != nil {
			var refusal error
			if admitted, refusal = sc.s.admit(h.Op, meta); refusal != nil {
				// Refused before its data is held: the data is read
				// past, into nothing, and the refusal answered.
				sc.startPhase(phaseData)
				_ = sc.conn.SetReadDeadline(time.Now().Add(frameTimeout))
				sc.unholdMeta(metaHeld)
				if _, err := io.CopyN(io.Discard, br, int64(h.DataLen)); err != nil {
					return err
				}
				if err := sc.write(Header{Kind: KindResponse, Op: h.Op, ID: h.ID, Status: CodeOf(refusal)}, []byte(refusal.Error()), nil); err != nil {
					return err
				}
				continue
			}
		}
		// Bound what this peer holds before reading its data: first its
		// own share, then the server's. Requests without data never
		// wait, so control traffic cannot be starved.
		if h.DataLen > 0 {
			if err := sc.hold(ctx, int64(h.DataLen)); err != nil {
				sc.unholdMeta(metaHeld)
				return err
			}
			sc.startPhase(phaseData)
			_ = sc.conn.SetReadDeadline(time.Now().Add(frameTimeout))
		}
		data := GetBuf(int(h.DataLen))
		if _, err := io.ReadFull(br, data); err != nil {
			sc.releaseData(data)
			sc.unholdMeta(metaHeld)
			return err
		}
		sc.phase.Store(phaseServer)
		if CRC(data) != h.DataCRC {
			sc.releaseData(data)
			sc.unholdMeta(metaHeld)
			return fmt.Errorf("%w: request data checksum mismatch", ErrFrame)
		}
		sc.sem <- struct{}{}
		sc.wg.Add(1)
		go sc.handle(ctx, h, &Request{Op: h.Op, Meta: meta, Data: data, Admitted: admitted}, metaHeld)
	}
}

// errIdle ends a connection that stayed silent: routine, not logged.
var errIdle = errors.New("idle connection")

// readBufferBytes is each connection's read buffer: enough for headers
// and small bodies; large data is read straight into its own buffer.
const readBufferBytes = 16 << 10

// awaitFrame waits for the next frame's first byte: a new connection
// must start its hello within HelloTimeout, and one with nothing in
// flight may stay silent for IdleTimeout; one with requests running
// (long polls) may wait for as long as they run.
func (sc *serverConn) awaitFrame(br *bufio.Reader, first bool) error {
	for {
		wait := sc.s.limits.IdleTimeout
		by := time.Now().Add(wait)
		if first {
			wait, by = sc.s.limits.HelloTimeout, sc.accepted.Add(sc.s.limits.HelloTimeout)
		}
		_ = sc.conn.SetReadDeadline(by)
		_, err := br.Peek(1)
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || first || len(sc.sem) == 0 {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("%w: silent for %v", errIdle, wait)
			}
			return err
		}
	}
}

// hello answers the handshake (handshake.go) and attaches the connection
// to its peer (fence.go). It must be the first frame, without data; a
// first frame that is not one is answered with why, and the connection
// closes.
func (sc *serverConn) hello(first bool, h Header, meta []byte) error {
	if !first {
		return fmt.Errorf("%w: a hello after the first frame", ErrFrame)
	}
	refuse := func(err error) error {
		_ = sc.write(Header{Kind: KindResponse, Op: h.Op, ID: h.ID, Status: CodeOf(err)}, []byte(err.Error()), nil)
		return err
	}
	if h.DataLen > 0 && h.Op == OpHello {
		return refuse(Errorf(ErrProtocol, "a hello with data"))
	}
	if h.Op != OpHello {
		return refuse(Errorf(ErrProtocol, "op %d before the handshake: this %s speaks braid protocol %d to %d, and every connection starts with a hello",
			h.Op, roleOr(sc.s.role), MinProtocolVersion, ProtocolVersion))
	}
	hello, err := decodeHello(meta)
	if err != nil {
		return refuse(err)
	}
	w, err := negotiate(hello, sc.s.role, sc.s.features)
	if err != nil {
		return refuse(err)
	}
	_ = sc.conn.SetReadDeadline(time.Time{})
	// Welcome first: fencing may wait for an older connection's requests,
	// and the client waits for the welcome before it sends any.
	if err := sc.write(Header{Kind: KindResponse, Op: OpHello, ID: h.ID}, w.encode(), nil); err != nil {
		return err
	}
	sc.welcomed.Store(true)
	return sc.s.fences.hello(sc, hello.Peer, hello.Gen)
}

func (sc *serverConn) releaseData(data []byte) {
	sc.unhold(int64(len(data)))
	PutBuf(data)
}

// hold takes n bytes of this connection's share of the in-flight budget,
// then of the server's.
func (sc *serverConn) hold(ctx context.Context, n int64) error {
	if err := sc.held.Acquire(ctx, n); err != nil {
		return err
	}
	if err := sc.s.inflight.Acquire(ctx, n); err != nil {
		sc.held.Release(n)
		return err
	}
	return nil
}

// unhold gives back what hold took.
func (sc *serverConn) unhold(n int64) {
	if n > 0 {
		sc.s.inflight.Release(n)
		sc.held.Release(n)
	}
}

// holdMeta takes budget for a meta section of n bytes, if it is large
// (a small one, control traffic, never waits) and returns how much it
// took. A peer that announces meta sections it never sends holds, across
// all its connections, at most the server's meta budget rather than a
// megabyte for each of thousands of connections. The meta budget is its
// own: a frame holding meta while it waits for data budget never blocks
// one waiting for meta (no cycle), and data never queues behind metas.
// The wait counts as the frame's head (bounded by frameHeadTimeout, and
// stalled for eviction: the peer has sent nothing of it).
func (sc *serverConn) holdMeta(ctx context.Context, n uint32) (int64, error) {
	if n <= smallMetaBytes {
		return 0, nil
	}
	wctx, cancel := context.WithTimeout(ctx, frameHeadTimeout)
	defer cancel()
	if err := sc.s.metaBudget.Acquire(wctx, int64(n)); err != nil {
		return 0, fmt.Errorf("%w: no room for %d bytes of meta in %v", ErrFrame, n, frameHeadTimeout)
	}
	_ = sc.conn.SetReadDeadline(time.Now().Add(frameHeadTimeout))
	return int64(n), nil
}

// unholdMeta gives back what holdMeta took.
func (sc *serverConn) unholdMeta(n int64) {
	if n > 0 {
		sc.s.metaBudget.Release(n)
	}
}

// smallMetaBytes is the largest meta section read without taking meta
// budget (an eighth of MaxInflightBytes, at least one frame's meta);
// maxHelloMetaBytes the largest a first frame may have.
const (
	smallMetaBytes    = 64 << 10
	maxHelloMetaBytes = helloBaseBytes + maxAuthBytes
)

func (sc *serverConn) handle(ctx context.Context, h Header, req *Request, metaHeld int64) {
	defer sc.wg.Done()
	defer func() { <-sc.sem }()
	defer sc.unholdMeta(metaHeld)
	if !sc.s.fences.begin(sc) {
		// A newer connection of the peer fenced this one: the request
		// is a late copy, or its sender has moved on. It never runs.
		sc.releaseData(req.Data)
		_ = sc.conn.Close()
		return
	}
	resp, err := sc.call(ctx, req)
	sc.s.fences.end(sc)
	sc.releaseData(req.Data)
	out := Header{Kind: KindResponse, Op: h.Op, ID: h.ID}
	if err == nil && (len(resp.Meta) > MaxMetaBytes || len(resp.Data) > MaxDataBytes) {
		// Cut to fit, it would decode as something else, or not at all.
		err = Errorf(ErrOverflow, "op %d: reply of %d+%d bytes past the frame's %d+%d", h.Op, len(resp.Meta), len(resp.Data), MaxMetaBytes, MaxDataBytes)
	}
	if err != nil {
		out.Status = CodeOf(err)
		resp = Response{Meta: []byte(err.Error()), Release: resp.Release}
	}
	if werr := sc.write(out, resp.Meta, resp.Data); werr != nil {
		_ = sc.conn.Close()
	}
	sc.lastAnswer.Store(time.Now().UnixNano())
	if resp.Release != nil {
		resp.Release()
	}
}

// call runs the handler; a panic is a bug, but one request's bug must not
// take down a server holding other clients' data, so it becomes an error.
func (sc *serverConn) call(ctx context.Context, req *Request) (resp Response, err error) {
	defer func() {
		if r := recover(); r != nil {
			sc.s.log.Error("handler panic", "op", req.Op, "panic", r, "stack", string(debug.Stack()))
			resp, err = Response{}, Errorf(ErrInternal, "handler panic")
		}
	}()
	return sc.s.handler(ctx, req)
}

func (sc *serverConn) write(h Header, meta, data []byte) error {
	if len(meta) > MaxMetaBytes { // only an error's text can be this long: see handle
		meta = meta[:MaxMetaBytes]
	}
	h.MetaLen, h.DataLen, h.DataCRC = uint32(len(meta)), uint32(len(data)), CRC(data)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	h.put(sc.hbuf[:], meta)
	_ = sc.conn.SetWriteDeadline(time.Now().Add(frameTimeout))
	bufs := net.Buffers{sc.hbuf[:], meta, data}
	_, err := bufs.WriteTo(sc.conn)
	return err
}

// frameTimeout bounds how long a frame's data may take to arrive once
// its header and meta have, and how long a response may take to be taken
// by the peer: a stalled peer loses its connection instead of holding
// buffers. frameHeadTimeout bounds a frame's header and meta from its
// first byte (a real client writes them at once).
const (
	frameTimeout     = 30 * time.Second
	frameHeadTimeout = 10 * time.Second
)
