package wire

import (
	"context"
	"sync"
)

// Pool keeps one pipelined connection per address and re-dials one that
// has failed. Safe for concurrent use.
type Pool struct {
	nw    Network
	mu    sync.Mutex
	conns map[string]*Client
}

// NewPool returns an empty pool dialling over TCP.
func NewPool() *Pool { return NewPoolOn(nil) }

// NewPoolOn returns an empty pool dialling over nw (nil: TCP).
func NewPoolOn(nw Network) *Pool { return &Pool{nw: OrTCP(nw), conns: map[string]*Client{}} }

// Get returns a healthy connection to addr, dialling if needed.
func (p *Pool) Get(ctx context.Context, addr string) (*Client, error) {
	p.mu.Lock()
	c := p.conns[addr]
	p.mu.Unlock()
	if c != nil && c.Err() == nil {
		return c, nil
	}
	nc, err := DialOn(ctx, p.nw, addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.conns[addr]; cur != nil && cur != c && cur.Err() == nil {
		nc.Close() // another caller re-dialled first
		return cur, nil
	}
	if c != nil {
		c.Close()
	}
	p.conns[addr] = nc
	return nc, nil
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.Close()
		delete(p.conns, a)
	}
}
