package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"
)

// Admission of connections. A server keeps at most MaxConns connections,
// and at most MaxConnsPerPeer from one IP address. A connection past a
// bound does not simply bounce: it takes the place of an idle connection
// (no request running) among those it counts against: one that has not
// finished its handshake first, else the one silent longest. So a flood
// of idle sockets, which would otherwise make a server deaf to everyone
// (about 20k made an MDS stop accepting for good), costs real clients
// nothing: they are busy, the flood is idle. Only when every
// counted connection is busy is the new one closed. Peers on one host
// share an address, so the per-peer bound evicts the same way.

// register admits conn: it returns the connection to serve, nil if it
// was refused, and false once the server is closed.
func (s *Server) register(conn net.Conn) (*serverConn, bool) {
	addr := peerAddr(conn)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = conn.Close()
		return nil, false
	}
	if s.byPeer[addr] >= s.limits.MaxConnsPerPeer && !s.evictLocked(addr) ||
		s.counted >= s.limits.MaxConns && !s.evictLocked("") {
		_ = conn.Close()
		s.log.Debug("connection refused: every counted connection is busy", "peer", addr)
		return nil, true
	}
	sc := &serverConn{s: s, conn: conn, addr: addr, sem: make(chan struct{}, s.limits.MaxInflightPerConn),
		held: semaphore.NewWeighted(s.limits.MaxConnInflightBytes)}
	sc.lastActive.Store(time.Now().UnixNano())
	s.conns[sc] = struct{}{}
	s.byPeer[addr]++
	s.counted++
	s.wg.Add(1)
	return sc, true
}

// uncountLocked takes sc out of the counts the bounds apply to (once:
// when it is evicted, or when it ends).
func (s *Server) uncountLocked(sc *serverConn) {
	if sc.evicted {
		return
	}
	sc.evicted = true
	s.counted--
	if s.byPeer[sc.addr]--; s.byPeer[sc.addr] <= 0 {
		delete(s.byPeer, sc.addr)
	}
}

// evictLocked closes the connection idle longest, from addr ("" any),
// and reports whether there was one.
func (s *Server) evictLocked(addr string) bool {
	var victim *serverConn
	for sc := range s.conns {
		if sc.evicted || (addr != "" && sc.addr != addr) || len(sc.sem) > 0 || sc.busy.Load() {
			continue
		}
		if victim == nil || evictsBefore(sc, victim) {
			victim = sc
		}
	}
	if victim == nil {
		return false
	}
	s.uncountLocked(victim)
	victim.closeRaw()
	return true
}

// evictsBefore orders idle connections for eviction: those still
// without a hello (the cheapest flood), then the one silent longest.
func evictsBefore(a, b *serverConn) bool {
	if wa, wb := a.welcomed.Load(), b.welcomed.Load(); wa != wb {
		return !wa
	}
	return a.lastActive.Load() < b.lastActive.Load()
}

// closeRaw closes sc's socket under its TLS, if any: a TLS close first
// writes a close_notify, which a peer that stopped reading would let
// stall for seconds, under the server's lock.
func (sc *serverConn) closeRaw() {
	if tc, ok := sc.conn.(*tls.Conn); ok {
		_ = tc.NetConn().Close()
		return
	}
	_ = sc.conn.Close()
}

func (s *Server) unregister(sc *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, sc)
	s.uncountLocked(sc)
}

// peerAddr is the IP address of conn's peer (the whole address for a
// network without IPs, like the simulation's).
func peerAddr(conn net.Conn) string {
	a := conn.RemoteAddr()
	if a == nil {
		return ""
	}
	if host, _, err := net.SplitHostPort(a.String()); err == nil {
		return host
	}
	return a.String()
}

// AcceptBackoff paces an accept loop through errors that are not the
// listener's end (out of descriptors): waits doubling from 5 ms to 1 s,
// logged at the first and at each of a second, so a server out of
// descriptors neither spins nor floods its log, and serves again as soon
// as a descriptor frees. The zero value is ready.
type AcceptBackoff struct{ d time.Duration }

const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// Reset starts the waits over, after an accept that succeeded.
func (b *AcceptBackoff) Reset() { b.d = 0 }

// Wait sleeps before the next accept; false if ctx ended meanwhile.
func (b *AcceptBackoff) Wait(ctx context.Context, log *slog.Logger, err error) bool {
	b.d = min(max(2*b.d, acceptBackoffMin), acceptBackoffMax)
	if b.d == acceptBackoffMax || b.d == acceptBackoffMin {
		log.Warn("accept failed; retrying", "err", err, "in", b.d)
	}
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// shedForDescriptors closes idle connections when an accept failed for
// want of descriptors (at most shedBatch, those without a hello first):
// the descriptors they free take the next connections, so a process full
// of idle sockets does not stay deaf until they time out. It reports
// whether it closed any.
func (s *Server) shedForDescriptors(err error) bool {
	if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < shedBatch && s.evictLocked("") {
		n++
	}
	if n > 0 {
		s.log.Debug("out of descriptors: closed idle connections", "closed", n)
	}
	return n > 0
}

// shedBatch is how many idle connections one failed accept closes.
const shedBatch = 16

// defaultMaxConns is 4096, or half the process's descriptor limit if
// that is less: the rest are for files and outgoing connections.
func defaultMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 4096
	}
	return int(min(4096, max(lim.Cur/2, 64)))
}

// Conns is how many connections the server holds now.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
