// Package simnet is the simulation's network twin: an in-memory
// wire.Network whose connections are net.Pipe pairs (so a whole cluster
// runs in one process, also inside a testing/synctest bubble, where real
// sockets cannot), and which can isolate a server (its connections are cut
// and new dials refused, as a partition or a crashed host would) and cut
// every connection (a flaky switch), and delay every message to and from
// a server (a congested or distant link; under synctest the delay passes
// on simulated time), and lose a server's replies after it acted on the
// request (the connection is cut as the reply is written), so clients
// meet requests that ran although they saw an error, and send them again.
// Per-message drops are otherwise not modelled: on a stream they are a
// cut connection.
package simnet

import (
	"context"
	"fmt"
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
	return &Net{listeners: map[string]*listener{}, isolated: map[string]bool{}, conns: map[net.Conn]link{}, delays: map[string]time.Duration{}, lose: map[string]*loss{}, nextPort: 1}
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
	l := n.listeners[addr]
	if l == nil || n.isolated[addr] || from.isolatedLocked() {
		n.mu.Unlock()
		return nil, fmt.Errorf("simnet dial %s: %w", addr, syscall.ECONNREFUSED)
	}
	client, server := net.Pipe()
	n.conns[client], n.conns[server] = link{addr, from}, link{addr, from}
	n.mu.Unlock()
	select {
	case l.accept <- &conn{Conn: server, n: n, addr: addr, server: true}:
		return &conn{Conn: client, n: n, addr: addr}, nil
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
