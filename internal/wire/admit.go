package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"
)

// Admission of connections. A server keeps at most MaxConns connections,
// and at most MaxConnsPerPeer from one IP address. A connection past a
// bound does not simply bounce: it takes the place of one that costs the
// server without serving anyone, among those it counts against. In order:
//
//  1. one that has stalled: it has not sent its hello within helloStall
//     of its accept (a real client says hello as it connects), or a
//     frame's header and meta (which a real client writes at once) have
//     paused for headStall, or its data has paused for StallGrace or
//     crawled under minFrameBytesPerSec for twice that;
//  2. one idle between frames for idleGrace, the one silent longest;
//  3. one that has sent part of a frame's header and meta and not the
//     rest, the oldest first;
//  4. one that has sent nothing yet (or is in its TLS handshake), the
//     oldest first;
//  5. one idle between frames for less than idleGrace (welcomed or
//     answered a moment ago, its next frame on the way).
//
// Bytes that wait in the kernel, not yet read, count as sent: eviction
// peeks at those of the idle and young ones (2, 4 and 5) before it takes
// one, and never takes one whose hello or next frame waits there whole.
// Idleness counts from the last byte read or answer written, whichever
// came later: a long request just answered is not idle.
//
// A connection with a request running, or whose data comes at a real
// client's pace, or that waits for the server's own in-flight budget, is
// never taken. So floods of idle sockets (about 20k once made an MDS
// stop accepting for good) and of partial frames cost real clients
// nothing, even when the flood reopens what is closed as fast as it can:
// its fresh partial frames are taken before a real client's connection,
// whose hello is whole before it is weighed. Only when every counted connection is
// serving is the new one turned away, with an ErrBusy answer to its
// hello when it speaks without TLS. Peers on one host share an address,
// so the per-peer bound evicts the same way.

// minFrameBytesPerSec is the slowest a frame may arrive, once it has
// taken twice StallGrace, and not be taken for a stalled one.
const minFrameBytesPerSec = 64 << 10

// register admits conn: it returns the connection to serve, nil if it
// was refused, and false once the server is closed.
func (s *Server) register(conn net.Conn) (*serverConn, bool) {
	addr := peerAddr(conn)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = conn.Close()
		return nil, false
	}
	if s.byPeer[addr] >= s.limits.MaxConnsPerPeer && !s.evictLocked(addr, now) ||
		s.counted >= s.limits.MaxConns && !s.evictLocked("", now) {
		s.log.Debug("connection refused: every counted connection is busy", "peer", addr)
		s.refuse(conn)
		return nil, true
	}
	sc := &serverConn{s: s, conn: conn, addr: addr, accepted: now, sem: make(chan struct{}, s.limits.MaxInflightPerConn),
		held: semaphore.NewWeighted(s.limits.MaxConnInflightBytes)}
	sc.lastByte.Store(now.UnixNano())
	s.conns[sc] = struct{}{}
	s.byPeer[addr]++
	s.counted++
	s.wg.Add(1)
	return sc, true
}

// refuse closes conn, turned away because the server is full. Without
// TLS it first answers the hello with ErrBusy, so the client says the
// server is full rather than guessing why it was cut; the answer and a
// short drain of the hello (a close over unread bytes resets the
// connection, which can lose the answer) run aside, at most
// maxRefusing at once. Called with s.mu held.
func (s *Server) refuse(conn net.Conn) {
	if _, isTLS := conn.(*tls.Conn); isTLS || s.refusing >= maxRefusing {
		_ = conn.Close()
		return
	}
	s.refusing++
	msg := []byte(fmt.Sprintf("this %s is full: %d connections, every one serving; retry later", roleOr(s.role), s.limits.MaxConns))
	go func() {
		defer func() {
			s.mu.Lock()
			s.refusing--
			s.mu.Unlock()
		}()
		var hb [headerBytes]byte
		Header{Kind: KindResponse, Op: OpHello, Status: ErrBusy, MetaLen: uint32(len(msg))}.put(hb[:], msg)
		_ = conn.SetDeadline(time.Now().Add(refuseWait))
		if _, err := conn.Write(append(hb[:], msg...)); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(conn, 64<<10))
		}
		_ = conn.Close()
	}()
}

const (
	maxRefusing = 64                     // refusals answered at once; more are closed unanswered
	refuseWait  = 200 * time.Millisecond // for one refusal's answer and drain
)

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

// evictLocked closes the connection that goes first (the order above),
// from addr ("" any), and reports whether there was one.
func (s *Server) evictLocked(addr string, now time.Time) bool {
	var victim *serverConn
	for try := 0; ; try++ {
		var rank int
		victim, rank = s.pickLocked(addr, now)
		if victim == nil || rank != 2 && rank != 4 && rank != 6 || victim.peekedAt.Load() == now.UnixNano() || try == maxVictimPeeks {
			break
		}
		// Not read yet, it may have sent its hello or its next frame
		// all the same: look at what waits in the kernel, and weigh it
		// again.
		victim.peekedAt.Store(now.UnixNano())
		victim.peeked.Store(peekFrame(victim.conn, s.peekBuf[:]))
	}
	if victim == nil {
		return false
	}
	s.uncountLocked(victim)
	victim.closeRaw()
	return true
}

// maxVictimPeeks bounds how many connections one eviction peeks at;
// peekBytes is how much of each it looks at: room for a hello without
// credentials and a small request (a larger one is taken for a part).
const (
	maxVictimPeeks = 32
	peekBytes      = 4 << 10
)

// What peekFrame finds waiting in the kernel.
const (
	peekNothing int32 = iota
	peekPartial       // part of a frame
	peekWhole         // a frame's whole header and meta
)

// peekFrame looks at the bytes from conn's peer that wait in the kernel,
// not yet read, into buf (without taking them): nothing, part of a
// frame's header and meta, or all of them. Over TLS it cannot tell.
func peekFrame(conn net.Conn, buf []byte) int32 {
	n := PeekUnread(conn, buf)
	switch {
	case n <= 0:
		return peekNothing
	case n < headerBytes:
		return peekPartial
	}
	h, err := parseHeader(buf[:headerBytes])
	if err != nil || n < headerBytes+int(h.MetaLen) {
		return peekPartial
	}
	return peekWhole
}

// pickLocked is the connection that goes first at now, and its rank; nil
// if none may go.
func (s *Server) pickLocked(addr string, now time.Time) (*serverConn, int) {
	var victim *serverConn
	victimRank, victimSince := 0, int64(0)
	for sc := range s.conns {
		if sc.evicted || (addr != "" && sc.addr != addr) {
			continue
		}
		rank, since := sc.evictRank(now.UnixNano(), s.limits.StallGrace)
		if rank == 0 {
			continue
		}
		if victim == nil || rank < victimRank || rank == victimRank && since < victimSince {
			victim, victimRank, victimSince = sc, rank, since
		}
	}
	return victim, victimRank
}

// evictRank places sc in the order above (1 goes first; 0 is never
// taken) and says since when it has been in that state, older first.
func (sc *serverConn) evictRank(now int64, stallGrace time.Duration) (rank int, since int64) {
	if len(sc.sem) > 0 {
		return 0, 0
	}
	last := sc.lastByte.Load()
	switch phase := sc.phase.Load(); {
	case phase == phaseBetween && !sc.welcomed.Load():
		if time.Duration(now-sc.accepted.UnixNano()) >= min(helloStall, stallGrace) {
			return 1, sc.accepted.UnixNano()
		}
		return sc.peekedRank(now, 4), sc.accepted.UnixNano()
	case phase == phaseBetween:
		last = max(last, sc.lastAnswer.Load())
		if time.Duration(now-last) >= min(idleGrace, stallGrace) {
			return sc.peekedRank(now, 2), last
		}
		return sc.peekedRank(now, 6), last
	case phase == phaseHead:
		if time.Duration(now-last) >= min(headStall, stallGrace) {
			return 1, last
		}
		return 3, sc.frameStart.Load()
	case phase == phaseData:
		if sc.stalled(now, stallGrace) {
			return 1, last
		}
	}
	return 0, 0
}

// peekedRank is the rank of a young connection between frames, rank if
// it was not peeked at in this eviction: one whose next frame's header
// and meta wait whole in the kernel is never taken, one with part of
// them goes with the partial frames, and a silent one after those not
// peeked at yet.
func (sc *serverConn) peekedRank(now int64, rank int) int {
	if sc.peekedAt.Load() != now {
		return rank
	}
	switch sc.peeked.Load() {
	case peekWhole:
		return 0
	case peekPartial:
		return 3
	}
	if rank == 2 {
		return 2 // idle, and nothing on its way
	}
	return rank + 1
}

// headStall is how long a frame's header and meta may pause before the
// connection is taken for a stalled one; helloStall how long a new
// connection may take to start its hello (its TLS handshake included);
// idleGrace how long a connection is silent between frames before it is
// taken for an idle one.
const (
	headStall  = 100 * time.Millisecond
	helloStall = time.Second
	idleGrace  = time.Second
)

// stalled reports whether the frame sc is reading has paused for
// stallGrace, or has crawled below minFrameBytesPerSec for twice that.
func (sc *serverConn) stalled(now int64, stallGrace time.Duration) bool {
	if time.Duration(now-sc.lastByte.Load()) >= stallGrace {
		return true
	}
	took := time.Duration(now - sc.frameStart.Load())
	got := sc.bytesRead.Load() - sc.frameBytes.Load()
	return took >= 2*stallGrace && float64(got) < took.Seconds()*minFrameBytesPerSec
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
	for n < shedBatch && s.evictLocked("", time.Now()) {
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

// PeekUnread copies into buf what conn's peer has sent that waits in the
// kernel, not yet read, without taking it, and returns how much: 0 when
// nothing waits or conn is not a socket it can look into (TLS, a
// simulated network).
func PeekUnread(conn net.Conn, buf []byte) int {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = raw.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return max(n, 0)
}
