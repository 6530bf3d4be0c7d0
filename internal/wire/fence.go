package wire

import (
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
// So once a client's next connection to a server is open, nothing it sent
// that server before can land behind what it sends next. A copy on the
// client's newest connection, after which it sent that server nothing
// more (it gave up after its retries), can still run late: fencing orders
// one client's requests to one server, no more.
//
// The server remembers a peer while it has connections, and at least the
// last maxPeers/2 of those without: on TCP no late copy can arrive once
// the server closed the connection it came on, so forgetting a peer whose
// connections are all gone loses nothing (but for a connection the kernel
// accepted and Serve has not taken yet, while over maxPeers/2 other peers
// came and went). Every connection starts with a hello: one that does not
// is refused (handshake.go).

// OpHello is the first request of every connection: the handshake
// (handshake.go), which names the peer and generation fencing needs.
const OpHello uint16 = 0xFFFF

// maxPeers bounds the peers a server remembers without a connection.
const maxPeers = 1 << 16

// NewPeerID returns a random peer id for a Pool or a lone Client.
func NewPeerID() uint64 { return rand.Uint64() | 1 } // never 0

// peer is what a server knows of one client's connections.
type peer struct {
	id      uint64
	gen     uint64 // the newest generation seen; older ones are fenced
	running int    // requests of gen running now
	older   int    // requests of older generations still running
	conns   map[*serverConn]struct{}
	idleSeq uint64 // when it lost its last connection (fences.seq)
}

// fences holds a server's peers. One mutex for the server: a request
// takes it twice.
type fences struct {
	mu    sync.Mutex
	drain *sync.Cond // signalled when a peer's older requests are done
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
	p := f.peers[id]
	if p == nil {
		f.forgetIdle()
		p = &peer{id: id}
		f.peers[id] = p
		f.idle++ // counted idle until attached below
	}
	if newest := p.gen; gen < newest {
		f.mu.Unlock() // newest read under the lock: p.gen moves with other hellos
		return fmt.Errorf("%w: connection generation %d of peer %x is older than its newest, %d", ErrFrame, gen, id, newest)
	}
	f.attachLocked(p, sc, gen)
	var fenced []*serverConn
	if gen > p.gen {
		p.gen = gen
		p.older += p.running
		p.running = 0
		for c := range p.conns {
			if c.gen < gen {
				fenced = append(fenced, c)
			}
		}
	}
	f.mu.Unlock()
	for _, c := range fenced { // outside the lock: a Close may block
		_ = c.conn.Close()
	}
	f.mu.Lock() // every connection of the newest generation waits, a second one too
	defer f.mu.Unlock()
	for p.older > 0 && p.gen == gen {
		f.drain.Wait()
	}
	return nil
}

func (f *fences) attachLocked(p *peer, sc *serverConn, gen uint64) {
	if len(p.conns) == 0 {
		f.idle--
		p.conns = map[*serverConn]struct{}{}
	}
	p.conns[sc] = struct{}{}
	sc.peer, sc.gen = p, gen
}

// begin reports whether a request read on sc may run: not if a newer
// connection of its peer fenced sc. (Requests of older generations have
// finished: every connection of the newest waited for them in its hello,
// a second one too.) Each true begin needs an end.
func (f *fences) begin(sc *serverConn) bool {
	if sc.peer == nil {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := sc.peer
	if sc.gen != p.gen {
		return false
	}
	p.running++
	return true
}

func (f *fences) end(sc *serverConn) {
	if sc.peer == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := sc.peer
	if sc.gen == p.gen {
		p.running--
		return
	}
	p.older--
	if p.older == 0 {
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
	p := sc.peer
	delete(p.conns, sc)
	if len(p.conns) == 0 {
		p.conns = nil
		f.seq++
		p.idleSeq = f.seq
		f.idle++
	}
}

// forgetIdle drops the older half of the peers without connections once
// there are maxPeers of them (f.mu held).
func (f *fences) forgetIdle() {
	if f.idle < maxPeers {
		return
	}
	cutoff := f.seq - maxPeers/2
	for id, p := range f.peers {
		if len(p.conns) == 0 && p.idleSeq <= cutoff {
			delete(f.peers, id)
			f.idle--
		}
	}
}
