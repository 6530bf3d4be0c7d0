package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Network is how servers listen and clients dial: TCP in production, an
// in-memory network that can drop, delay and partition in the simulation
// (internal/simnet).
type Network interface {
	Listen(addr string) (net.Listener, error)
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// TCP is the real network.
type TCP struct{}

func (TCP) Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

func (TCP) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return conn, nil
}

// OrTCP is nw, or TCP when nw is nil.
func OrTCP(nw Network) Network {
	if nw == nil {
		return TCP{}
	}
	return nw
}

// DialOn connects to addr over nw, as a peer of its own.
func DialOn(ctx context.Context, nw Network, addr string) (*Client, error) {
	return dialFenced(ctx, nw, addr, NewPeerID(), 1)
}

// dialFenced connects to addr over nw and says hello as generation gen
// of peer id (fence.go).
func dialFenced(ctx context.Context, nw Network, addr string, id, gen uint64) (*Client, error) {
	conn, err := OrTCP(nw).Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := NewClient(conn)
	hello := Hello{Peer: id, Gen: gen, MinVersion: MinProtocolVersion, MaxVersion: ProtocolVersion}
	if err := c.send(ctx, Header{Kind: KindRequest, Op: OpHello}, hello.encode(), nil); err != nil {
		c.fail(transportErr(err))
		return nil, fmt.Errorf("dial %s: hello: %w", addr, c.Err())
	}
	t := time.NewTimer(handshakeTimeout)
	defer t.Stop()
	select {
	case <-c.welcomed:
		return c, nil
	case <-c.done:
		err := c.Err()
		var remote *RemoteError
		if !errors.As(err, &remote) {
			// Cut before the welcome: the network, a server full of
			// busy connections that could not say so (over TLS), or one
			// older than braid protocol 2, which closes on the new hello.
			return nil, fmt.Errorf("dial %s: the server closed the connection before answering the handshake (it may be full of busy connections, or the network cut it): %w", addr, err)
		}
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	case <-ctx.Done():
		c.fail(ErrClosed)
		return nil, fmt.Errorf("dial %s: handshake: %w", addr, ctx.Err())
	case <-t.C:
		c.fail(ErrClosed)
		return nil, fmt.Errorf("dial %s: %w: no answer to the handshake in %v", addr, ErrClosed, handshakeTimeout)
	}
}

// handshakeTimeout bounds the wait for a server's welcome.
const handshakeTimeout = 10 * time.Second
