package mds

import (
	"context"
	"time"

	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// osdClient is how the MDS's own requests reach OSDs (deletions, intent
// resolution, labels, recover-metadata's scans): by the address the
// cluster map last heard, each bounded by osdCallTimeout.
type osdClient struct {
	cluster *clusterMap
	pool    *wire.Pool
}

// call sends one request to an up OSD.
func (o *osdClient) call(ctx context.Context, id uint32, op uint16, req osdproto.Req, now time.Time) error {
	_, err := o.callData(ctx, id, op, req, nil, now)
	return err
}

// callData is call with request data; it returns the reply's meta.
func (o *osdClient) callData(ctx context.Context, id uint32, op uint16, req osdproto.Req, data []byte, now time.Time) ([]byte, error) {
	ep, ok := o.cluster.endpoint(id, now)
	if !ok || !ep.Up {
		return nil, wire.Errorf(wire.ErrUnavail, "OSD %d is down", id)
	}
	meta, _, err := o.send(ctx, ep.Addr, op, req, data, nil)
	return meta, err
}

// scan asks OSD id, up or not, for a page of its objects into buf.
func (o *osdClient) scan(ctx context.Context, id uint32, req osdproto.Req, buf []byte, now time.Time) ([]byte, int, error) {
	ep, ok := o.cluster.endpoint(id, now)
	if !ok {
		return nil, 0, wire.Errorf(wire.ErrUnavail, "OSD %d unknown", id)
	}
	return o.send(ctx, ep.Addr, osdproto.OpScan, req, nil, buf)
}

func (o *osdClient) send(ctx context.Context, addr string, op uint16, req osdproto.Req, data, resp []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, osdCallTimeout)
	defer cancel()
	conn, err := o.pool.Get(ctx, addr)
	if err != nil {
		return nil, 0, err
	}
	return conn.Call(ctx, op, req.Encode(op), data, resp)
}
