package client

import (
	"context"
	"sync"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// onceSession names this client's namespace mutations so the MDS applies
// each once however often it is sent (the MDS's once.go): a retry after a
// lost reply, a reconnect or an MDS restart gets the original answer.
type onceSession struct {
	id       uint64
	mu       sync.Mutex
	last     uint64              // the last sequence number given out
	inflight map[uint64]struct{} // sequence numbers not yet answered
}

func newOnceSession() *onceSession {
	return &onceSession{id: wire.NewPeerID(), inflight: map[uint64]struct{}{}}
}

// begin names a new mutation. Its floor is the lowest sequence number
// still unanswered: the MDS may forget every record below it.
func (o *onceSession) begin() mdsproto.Once {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.last++
	o.inflight[o.last] = struct{}{}
	floor := o.last
	for seq := range o.inflight {
		floor = min(floor, seq)
	}
	return mdsproto.Once{Session: o.id, Seq: o.last, Floor: floor}
}

// end marks a mutation answered (or abandoned: the caller stopped
// retrying it, and will not send it again).
func (o *onceSession) end(seq uint64) {
	o.mu.Lock()
	delete(o.inflight, seq)
	o.mu.Unlock()
}

// onceRequest is a request that carries a mutation's name.
type onceRequest interface{ SetOnce(mdsproto.Once) }

// mutate sends a namespace mutation named for exactly-once execution:
// every retry inside mds sends the same name.
func (c *Client) mutate(ctx context.Context, op uint16, req onceRequest, out any) error {
	o := c.once.begin()
	defer c.once.end(o.Seq)
	return c.mutateAs(ctx, c.mdsPool, o, op, req, out)
}

// mutateAs sends a mutation named o (begun by the caller, who ends it
// once it stops sending it: sent again under the same name, it is
// applied once) over a connection from pool.
func (c *Client) mutateAs(ctx context.Context, pool *wire.Pool, o mdsproto.Once, op uint16, req onceRequest, out any) error {
	req.SetOnce(o)
	m := c.metaCache()
	m.changing()
	defer m.changing()
	meta, err := c.mdsMetaOn(ctx, pool, op, req)
	if err != nil {
		return err
	}
	if out != nil {
		if err := mdsproto.Unmarshal(meta, out); err != nil {
			return err
		}
	}
	if m != nil {
		var s struct {
			Self *mdsproto.CacheSelf `json:"cache_self"`
		}
		if mdsproto.Unmarshal(meta, &s) == nil {
			var made uint64
			if in, ok := out.(*mdsproto.Inode); ok && op == mdsproto.OpMkdir {
				made = in.Ino
			}
			m.self(s.Self, made)
		}
	}
	return nil
}
