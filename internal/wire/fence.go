package wire

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
)

// Fencing: a request that a peer sent on a connection it has since given
// up on must never run after what the peer sent since. TCP delivers a
// stream's bytes once and in order, but not across connections: a client
// whose connection broke (a lost reply, a timeout, a cut) sends its
// request again on a new one, while the first copy may still sit in the
// network or in the server's socket buffer, and reach a handler after the
// resend and after newer requests that overwrote the same bytes. (The
// simulation's network, internal/simnet, delivers such copies late.)
//
// So every connection a Client dials starts with a hello naming the peer
// (a random id, one per Pool) and the connection's generation (one more
// for each dial to that address). A hello of a newer generation fences
// the peer's older connections: the server closes them, waits for their
// requests that are running to finish, and refuses every request of an
// older generation from then on, however late it arrives. A hello of an
// older generation than the peer's newest is refused. Requests of the
// newest generation run as before: a connection's pipelined requests
// still run concurrently, and ordering overlapping ones is the client's
// business.
//
// The server remembers a peer while it has connections, and the last
// maxPeers of those without: on TCP no late copy can arrive once the
// server closed the connection it came on, so forgetting a peer whose
// connections are all gone loses nothing. A connection that starts
// without a hello (an old client, a test speaking raw frames) is
// anonymous and never fenced.

// OpHello is the first request of a fenced connection: meta = peer id u64,
// generation u64. The server answers nothing: the client pipelines its
// requests behind it; a refused hello closes the connection.
const OpHello uint16 = 0xFFFF

const helloMetaBytes = 16

// maxPeers bounds the peers a server remembers without a connection.
const maxPeers = 1 << 16

// NewPeerID returns a random peer id for a Pool or a lone Client.
func NewPeerID() uint64 { return rand.Uint64() | 1 } // never 0

func encodeHello(id, gen uint64) []byte {
	b := make([]byte, helloMetaBytes)
	binary.LittleEndian.PutUint64(b, id)
	binary.LittleEndian.PutUint64(b[8:], gen)
	return b
}

func decodeHello(meta []byte) (id, gen uint64, err error) {
	if len(meta) != helloMetaBytes {
		return 0, 0, fmt.Errorf("%w: hello of %d bytes", ErrFrame, len(meta))
	}
	id, gen = binary.LittleEndian.Uint64(meta), binary.LittleEndian.Uint64(meta[8:])
	if id == 0 || gen == 0 {
		return 0, 0, fmt.Errorf("%w: hello without a peer or generation", ErrFrame)
	}
	return id, gen, nil
}

// peer is what a server knows of one client's connections.
type peer struct {
	id      uint64
	gen     uint64 // the newest generation seen; older ones are fenced
	running int    // requests of gen running now
	conns   map[*serverConn]struct{}
	idleSeq uint64 // when it lost its last connection (fences.seq)
}

// fences holds a server's peers. One mutex: a request takes it twice.
type fences struct {
	mu    sync.Mutex
	drain *sync.Cond // signalled when a peer's running drops to 0
	peers map[uint64]*peer
	seq   uint64
	idle  int // peers without connections
}

func newFences() *fences {
	f := &fences{peers: map[uint64]*peer{}}
	f.drain = sync.NewCond(&f.mu)
	return f
}

// hello attaches sc to peer id at generation gen. A newer generation
// closes the peer's older connections and waits until their running
// requests have finished; an older one is refused.
func (f *fences) hello(sc *serverConn, id, gen uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.peers[id]
	if p == nil {
		f.forgetIdle()
		p = &peer{id: id, conns: map[*serverConn]struct{}{}}
		f.peers[id] = p
	} else if len(p.conns) == 0 {
		f.idle--
	}
	if gen < p.gen {
		f.detachLocked(p, nil)
		return fmt.Errorf("%w: connection generation %d of peer %x is older than its newest, %d", ErrFrame, gen, id, p.gen)
	}
	p.conns[sc] = struct{}{}
	sc.peer, sc.gen = p, gen
	if gen == p.gen {
		return nil
	}
	p.gen = gen
	for c := range p.conns {
		if c.gen < gen {
			_ = c.conn.Close()
		}
	}
	for p.running > 0 {
		f.drain.Wait()
	}
	return nil
}

// begin reports whether a request read on sc may run: not if a newer
// connection of its peer fenced sc. Each true begin needs an end.
func (f *fences) begin(sc *serverConn) bool {
	if sc.peer == nil {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if sc.gen != sc.peer.gen {
		return false
	}
	sc.peer.running++
	return true
}

func (f *fences) end(sc *serverConn) {
	if sc.peer == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sc.peer.running--
	if sc.peer.running == 0 {
		f.drain.Broadcast()
	}
}

// detach forgets sc once it has closed and its handlers have returned.
func (f *fences) detach(sc *serverConn) {
	if sc.peer == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detachLocked(sc.peer, sc)
}

func (f *fences) detachLocked(p *peer, sc *serverConn) {
	if sc != nil {
		delete(p.conns, sc)
	}
	if len(p.conns) == 0 {
		f.seq++
		p.idleSeq = f.seq
		f.idle++
	}
}

// forgetIdle drops the peers without connections that have been idle
// longest once there are maxPeers of them (f.mu held).
func (f *fences) forgetIdle() {
	if f.idle < maxPeers {
		return
	}
	cutoff := f.seq - maxPeers/2 // forget the older half at once
	for id, p := range f.peers {
		if len(p.conns) == 0 && p.idleSeq <= cutoff {
			delete(f.peers, id)
			f.idle--
		}
	}
}
