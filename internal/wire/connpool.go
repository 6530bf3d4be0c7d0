package wire

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrPoolClosed is what a Pool answers once closed: its owner is done,
// and nothing it started (a read-ahead, a request sent behind a caller)
// may dial a connection that would outlive it. It is not ErrClosed, so
// callers that retry a broken connection do not retry it.
var ErrPoolClosed = errors.New("connection pool closed")

// Pool keeps one pipelined connection per address and re-dials one that
// has failed. Its connections are fenced (fence.go): one peer id for the
// pool, and each dial one generation newer than every dial before (one
// counter for the pool, so a server reached under two addresses sees
// them in order too), so a server never runs a request from a connection
// the pool replaced. Safe for concurrent use.
type Pool struct {
	nw     Network
	id     uint64
	gen    atomic.Uint64
	mu     sync.Mutex
	conns  map[string]*poolConn
	closed bool
}

// poolConn is the pool's connection to one address.
type poolConn struct {
	dialing chan struct{} // one dial at a time: a newer never loses to an older
	c       *Client       // guarded by Pool.mu
}

// NewPool returns an empty pool dialling over TCP.
func NewPool() *Pool { return NewPoolOn(nil) }

// NewPoolOn returns an empty pool dialling over nw (nil: TCP).
func NewPoolOn(nw Network) *Pool {
	return &Pool{nw: OrTCP(nw), id: NewPeerID(), conns: map[string]*poolConn{}}
}

// Get returns a healthy connection to addr, dialling if needed.
func (p *Pool) Get(ctx context.Context, addr string) (*Client, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrPoolClosed
	}
	pc := p.conns[addr]
	if pc == nil {
		pc = &poolConn{dialing: make(chan struct{}, 1)}
		p.conns[addr] = pc
	}
	c := pc.c
	p.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	select {
	case pc.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-pc.dialing }()
	p.mu.Lock()
	c = pc.c
	p.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil // another caller re-dialled meanwhile
	}
	nc, err := dialFenced(ctx, p.nw, addr, p.id, p.gen.Add(1))
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed { // closed while dialling
		p.mu.Unlock()
		nc.Close()
		return nil, ErrPoolClosed
	}
	pc.c = nc
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
	return nc, nil
}

// Close closes every connection; Get answers ErrPoolClosed from then on.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, pc := range p.conns {
		if pc.c != nil {
			pc.c.Close()
			pc.c = nil
		}
	}
}
