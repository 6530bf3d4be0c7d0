// Package simnet is the simulation's network twin: an in-memory
// wire.Network whose connections are net.Pipe pairs (so a whole cluster
// runs in one process, also inside a testing/synctest bubble, where real
// sockets cannot), and which can isolate a server (its connections are cut
// and new dials refused, as a partition or a crashed host would) and cut
// every connection (a flaky switch), and delay every message to and from
// a server (a congested or distant link; under synctest the delay passes
// on simulated time), and lose a server's replies after it acted on the
// request (the connection is cut as the reply is written), so clients
// meet requests that ran although they saw an error, and send them again,
// and hold a request back in the network while its client gives up on
// the connection and sends it again, then deliver it late (duplicated,
// and reordered after what the client sent since). Per-message drops are
// otherwise not modelled: on a stream they are a cut connection.
package simnet

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// acceptBacklog bounds the connections waiting to be accepted per
// listener, as a kernel's backlog does.
const acceptBacklog = 128

// Net is an in-memory network. Safe for concurrent use.
type Net struct {
	mu        sync.Mutex
	listeners map[string]*listener
	isolated  map[string]bool
	conns     map[net.Conn]link // every open connection end → what it links
	delays    map[string]time.Duration
	lose      map[string]*loss
	dups      map[string]*dup
	ghosts    int // held requests waiting to be delivered
	frame     func([]byte) int
	closed    chan struct{} // closed by Close: held copies are dropped
	nextPort  int
}

// link is what a connection joins: the server address it reaches, and
// the host it was dialled from (nil: no host named).
type link struct {
	server string
	from   *Host
}

// loss is a server's lost replies: one write in oneIn, drawn from rng.
type loss struct {
	oneIn int
	rng   *rand.Rand
	lost  int
}

// New returns an empty network.
func New() *Net {
	return &Net{listeners: map[string]*listener{}, isolated: map[string]bool{}, conns: map[net.Conn]link{}, delays: map[string]time.Duration{}, lose: map[string]*loss{}, dups: map[string]*dup{}, closed: make(chan struct{}), nextPort: 1}
}

// Listen listens at addr ("host:port"); port 0 picks a free one.
func (n *Net) Listen(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("simnet listen %q: %w", addr, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == "0" {
		for {
			addr = net.JoinHostPort(host, fmt.Sprint(n.nextPort))
			n.nextPort++
			if n.listeners[addr] == nil {
				break
			}
		}
	}
	if n.listeners[addr] != nil {
		return nil, fmt.Errorf("simnet listen %s: %w", addr, syscall.EADDRINUSE)
	}
	l := &listener{n: n, addr: addr, accept: make(chan net.Conn, acceptBacklog), done: make(chan struct{})}
	n.listeners[addr] = l
	return l, nil
}

// Dial connects to the listener at addr.
func (n *Net) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return n.dialFrom(ctx, nil, addr)
}

func (n *Net) dialFrom(ctx context.Context, from *Host, addr string) (net.Conn, error) {
	n.mu.Lock()
	return n.connectLocked(ctx, from, n.listeners[addr], addr)
}

// connectLocked connects to listener l (nil: none) at addr; n.mu is held
// on entry and released.
func (n *Net) connectLocked(ctx context.Context, from *Host, l *listener, addr string) (net.Conn, error) {
	if l == nil || n.listeners[addr] != l || n.isolated[addr] || from.isolatedLocked() {
		n.mu.Unlock()
		return nil, fmt.Errorf("simnet dial %s: %w", addr, syscall.ECONNREFUSED)
	}
	client, server := net.Pipe()
	n.conns[client], n.conns[server] = link{addr, from}, link{addr, from}
	n.mu.Unlock()
	select {
	case l.accept <- &conn{Conn: server, n: n, addr: addr, server: true}:
		select {
		case <-l.done:
			// Closed meanwhile: its backlog may have been emptied before
			// this connection joined it, and nobody would read it. (Both
			// cases of the select above can be ready at once.)
		default:
			return &conn{Conn: client, n: n, addr: addr, lis: l}, nil
		}
	case <-l.done:
	case <-ctx.Done():
	}
	n.forget(client, server)
	_ = client.Close()
	_ = server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("simnet dial %s: %w", addr, syscall.ECONNREFUSED)
}

// Isolate cuts every connection to the server at addr, and every one
// dialled from the Host that listens there, and refuses new ones either
// way until Heal: a partition, or a host that stopped answering.
func (n *Net) Isolate(addr string) {
	n.mu.Lock()
	n.isolated[addr] = true
	var cut []net.Conn
	for c, l := range n.conns {
		if l.server == addr || l.from.isolatedLocked() {
			cut = append(cut, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
}

// Delay makes every write on a connection to or from the server at addr
// wait d first (0 ends it).
func (n *Net) Delay(addr string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d <= 0 {
		delete(n.delays, addr)
		return
	}
	n.delays[addr] = d
}

// LoseReplies makes about one write in oneIn by the server at addr cut
// its connection instead of delivering (0 ends it): the request it
// answers ran, the client sees a broken connection. Which writes is drawn
// from seed.
func (n *Net) LoseReplies(addr string, oneIn int, seed uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if oneIn <= 0 {
		delete(n.lose, addr)
		return
	}
	n.lose[addr] = &loss{oneIn: oneIn, rng: rand.New(rand.NewPCG(seed, 0x1055))}
}

// LostReplies is how many replies of the server at addr were lost since
// LoseReplies.
func (n *Net) LostReplies(addr string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.lose[addr]; l != nil {
		return l.lost
	}
	return 0
}

// loseReply draws whether the server at addr loses the reply it writes.
func (n *Net) loseReply(addr string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.lose[addr]
	if l == nil || l.rng.IntN(l.oneIn) != 0 {
		return false
	}
	l.lost++
	return true
}

func (n *Net) delayOf(addr string) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.delays[addr]
}

// Heal ends the isolation of addr.
func (n *Net) Heal(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.isolated, addr)
}

// CutAll closes every open connection (peers reconnect).
func (n *Net) CutAll() int {
	n.mu.Lock()
	var cut []net.Conn
	for c := range n.conns {
		cut = append(cut, c)
	}
	n.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
	return len(cut)
}

// Host is one host's view of the network: what it dials is cut and
// refused while an address it listens on is isolated, as a partition
// cuts a host off both ways. Give each simulated server its own.
type Host struct {
	n     *Net
	addrs []string // listened on; guarded by n.mu
}

// Host returns a new host on the network.
func (n *Net) Host() *Host { return &Host{n: n} }

// Listen listens at addr, as Net.Listen, on the host.
func (h *Host) Listen(addr string) (net.Listener, error) {
	l, err := h.n.Listen(addr)
	if err == nil {
		h.n.mu.Lock()
		h.addrs = append(h.addrs, l.Addr().String())
		h.n.mu.Unlock()
	}
	return l, err
}

// Dial connects from the host to the listener at addr.
func (h *Host) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return h.n.dialFrom(ctx, h, addr)
}

// isolatedLocked reports whether an address of h is isolated (n.mu held).
func (h *Host) isolatedLocked() bool {
	if h == nil {
		return false
	}
	for _, a := range h.addrs {
		if h.n.isolated[a] {
			return true
		}
	}
	return false
}

// Addrs lists the addresses listened on whose host starts with prefix.
func (n *Net) Addrs(prefix string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for a := range n.listeners {
		if strings.HasPrefix(a, prefix) {
			out = append(out, a)
		}
	}
	return out
}

func (n *Net) forget(cs ...net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range cs {
		delete(n.conns, c)
	}
}

// conn is one end of a connection; closing it forgets it.
type conn struct {
	net.Conn
	n      *Net
	addr   string // the server's
	server bool   // the server's end
	once   sync.Once

	// With Net.SplitRequests, what a client writes is passed on in
	// whole requests: pending holds the start of one not yet whole,
	// first the connection's first request (a protocol's hello).
	pending []byte
	first   []byte
	plain   bool // not split (a late copy's own connection, or lost track)
	lis     *listener

	// Delayed writes go through a queue and a pump goroutine, as bytes
	// through a socket's send buffer: the writer does not wait (it may
	// hold locks others wait on, which a sleeping writer would stall in a
	// way synctest cannot advance past). Once a write was queued, every
	// later one is, so bytes stay in order.
	qmu  sync.Mutex
	q    chan delayed // nil until the first delayed write
	done chan struct{}
	qerr error
}

type delayed struct {
	at time.Time
	b  []byte
}

// maxQueuedWrites bounds the writes waiting in one connection's queue.
const maxQueuedWrites = 256

func (c *conn) Write(p []byte) (int, error) {
	if c.server && c.n.loseReply(c.addr) {
		_ = c.Close()
		return 0, net.ErrClosed
	}
	if !c.server && !c.plain && c.n.splits() {
		return c.writeRequests(p)
	}
	return c.send(p)
}

// send passes p on, through the delay queue if the link is slow.
func (c *conn) send(p []byte) (int, error) {
	d := c.n.delayOf(c.addr)
	c.qmu.Lock()
	if d <= 0 && c.q == nil {
		c.qmu.Unlock()
		return c.Conn.Write(p)
	}
	if c.q == nil {
		c.q, c.done = make(chan delayed, maxQueuedWrites), make(chan struct{})
		go c.pump()
	}
	err := c.qerr
	c.qmu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case c.q <- delayed{at: time.Now().Add(d), b: append([]byte(nil), p...)}:
		return len(p), nil
	case <-c.done:
		return 0, net.ErrClosed
	}
}

// pump delivers queued writes once their delay has passed.
func (c *conn) pump() {
	for {
		select {
		case w := <-c.q:
			if wait := time.Until(w.at); wait > 0 {
				select {
				case <-time.After(wait):
				case <-c.done:
					return
				}
			}
			if _, err := c.Conn.Write(w.b); err != nil {
				c.qmu.Lock()
				c.qerr = err
				c.qmu.Unlock()
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *conn) Close() error {
	c.once.Do(func() {
		c.n.forget(c.Conn)
		c.qmu.Lock()
		if c.done != nil {
			close(c.done)
		}
		c.qmu.Unlock()
	})
	return c.Conn.Close()
}

type listener struct {
	n      *Net
	addr   string
	accept chan net.Conn
	done   chan struct{}
	once   sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		delete(l.n.listeners, l.addr)
		l.n.mu.Unlock()
		for {
			select {
			case c := <-l.accept: // dialled, never accepted
				_ = c.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *listener) Addr() net.Addr { return addr(l.addr) }

type addr string

func (a addr) Network() string { return "simnet" }
func (a addr) String() string  { return string(a) }

// maxHeld bounds the requests held back on one network.
const maxHeld = 64

// SplitRequests makes clients' connections pass on what they write in
// whole requests, which frame tells apart: the length of the request a
// byte stream starts with, 0 while too few bytes to tell, -1 if it is not
// a request (the connection is then passed through as it is). Duplicate
// needs it. Set it before the first dial.
func (n *Net) SplitRequests(frame func([]byte) int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.frame = frame
}

func (n *Net) splits() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.frame != nil
}

// dup is a server's held-back requests: one in oneIn, drawn from rng.
type dup struct {
	oneIn int
	late  time.Duration
	rng   *rand.Rand
	held  int
}

// Duplicate holds about one request in oneIn that a client sends to the
// server at addr back in the network and cuts the client's connection, so
// the client sends it again on a new one; late after it was sent, the
// held copy reaches the server anyway, on a connection of its own that
// starts with the first request of the connection it was sent on (the
// state a server keeps per connection, such as a hello, comes with it),
// and nobody reads its reply. That is a copy delayed in a queue or a
// socket buffer past the client's patience: duplicated, and after the
// requests sent since. A copy is lost if the server restarted (listens
// anew) meanwhile, as a TCP connection does not outlive its server
// process, or if it cannot be reached. 0 ends it (copies held still
// arrive). Which requests is drawn from seed. Needs SplitRequests.
func (n *Net) Duplicate(addr string, oneIn int, late time.Duration, seed uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if oneIn <= 0 {
		delete(n.dups, addr)
		return
	}
	n.dups[addr] = &dup{oneIn: oneIn, late: late, rng: rand.New(rand.NewPCG(seed, 0xd0b1e))}
}

// Duplicated is how many requests to the server at addr were held back
// since Duplicate.
func (n *Net) Duplicated(addr string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if d := n.dups[addr]; d != nil {
		return d.held
	}
	return 0
}

// hold draws whether to hold back a request to addr, and when to deliver
// it if so.
func (n *Net) hold(addr string) (late time.Duration, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.dups[addr]
	if d == nil || d.rng.IntN(d.oneIn) != 0 || n.ghosts >= maxHeld {
		return 0, false
	}
	d.held++
	n.ghosts++
	return d.late, true
}

// writeRequests passes on the whole requests in what the client wrote so
// far, holding back those Duplicate picks.
func (c *conn) writeRequests(p []byte) (int, error) {
	c.pending = append(c.pending, p...)
	for {
		size := c.n.frame(c.pending)
		if size < 0 || len(c.pending) > maxPendingBytes {
			c.plain = true // not requests: pass the rest through
			b := c.pending
			c.pending = nil
			if _, err := c.send(b); err != nil {
				return 0, err
			}
			return len(p), nil
		}
		if size == 0 || len(c.pending) < size {
			return len(p), nil
		}
		req := c.pending[:size:size]
		c.pending = append([]byte(nil), c.pending[size:]...)
		if c.first == nil {
			c.first = req
		} else if late, ok := c.n.hold(c.addr); ok {
			go c.n.deliverLate(c.lis, c.first, req, late)
			_ = c.Close()
			return 0, net.ErrClosed
		}
		if _, err := c.send(req); err != nil {
			return 0, err
		}
	}
}

// maxPendingBytes bounds what one connection buffers of a request: past
// it the connection is passed through unsplit.
const maxPendingBytes = 32 << 20

// deliverLate sends the held request req to l's server once late has
// passed, on a connection of its own that starts with first, and reads
// the replies only to let the server finish writing them.
func (n *Net) deliverLate(l *listener, first, req []byte, late time.Duration) {
	defer func() {
		n.mu.Lock()
		n.ghosts--
		n.mu.Unlock()
	}()
	select {
	case <-time.After(late):
	case <-n.closed:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.mu.Lock()
	// Only to the listener it was sent to: a restarted server listens
	// anew, and its connections died with it.
	nc, err := n.connectLocked(ctx, nil, l, l.addr)
	if err != nil {
		return
	}
	c := nc.(*conn)
	c.plain = true
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	go func() { _, _ = io.Copy(io.Discard, c) }()
	if _, err := c.Write(append(append([]byte(nil), first...), req...)); err != nil {
		return
	}
	select { // let it run; its reply is dropped
	case <-time.After(time.Second):
	case <-n.closed:
	}
}

// Close drops the requests held back (Duplicate) and not yet delivered,
// so no goroutine of the network outlives it.
func (n *Net) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.closed:
	default:
		close(n.closed)
	}
}
