// Package simnet is the simulation's network twin: an in-memory
// wire.Network whose connections are net.Pipe pairs (so a whole cluster
// runs in one process, also inside a testing/synctest bubble, where real
// sockets cannot), and which can isolate a server (its connections are cut
// and new dials refused, as a partition or a crashed host would) and cut
// every connection (a flaky switch). Delays and per-message drops come
// with the whole-cluster simulation.
package simnet

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
)

// acceptBacklog bounds the connections waiting to be accepted per
// listener, as a kernel's backlog does.
const acceptBacklog = 128

// Net is an in-memory network. Safe for concurrent use.
type Net struct {
	mu        sync.Mutex
	listeners map[string]*listener
	isolated  map[string]bool
	conns     map[net.Conn]string // every open connection end → the server address it reaches
	nextPort  int
}

// New returns an empty network.
func New() *Net {
	return &Net{listeners: map[string]*listener{}, isolated: map[string]bool{}, conns: map[net.Conn]string{}, nextPort: 1}
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
	n.mu.Lock()
	l := n.listeners[addr]
	if l == nil || n.isolated[addr] {
		n.mu.Unlock()
		return nil, fmt.Errorf("simnet dial %s: %w", addr, syscall.ECONNREFUSED)
	}
	client, server := net.Pipe()
	n.conns[client], n.conns[server] = addr, addr
	n.mu.Unlock()
	select {
	case l.accept <- &conn{Conn: server, n: n}:
		return &conn{Conn: client, n: n}, nil
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

// Isolate cuts every connection to the server at addr and refuses new
// dials until Heal: a partition, or a host that stopped answering.
func (n *Net) Isolate(addr string) {
	n.mu.Lock()
	n.isolated[addr] = true
	var cut []net.Conn
	for c, a := range n.conns {
		if a == addr {
			cut = append(cut, c)
		}
	}
	n.mu.Unlock()
	for _, c := range cut {
		_ = c.Close()
	}
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
	n    *Net
	once sync.Once
}

func (c *conn) Close() error {
	c.once.Do(func() { c.n.forget(c.Conn) })
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
