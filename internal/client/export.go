package client

import "context"

// CallMDS sends one request to the MDS serving it, following reroutes
// and retrying while the MDS is unreachable within the client's I/O
// timeout; out, if not nil, receives the decoded answer.
func (c *Client) CallMDS(ctx context.Context, op uint16, req, out any) error {
	return c.mds(ctx, op, req, out)
}

// CallOSD sends one request to the OSD at addr within the client's I/O
// timeout and returns the reply's meta; resp, if not nil, receives its
// data.
func (c *Client) CallOSD(ctx context.Context, addr string, op uint16, req, data, resp []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.IOTimeout)
	defer cancel()
	conn, err := c.conns.Get(ctx, addr)
	if err != nil {
		return nil, err
	}
	meta, _, err := conn.Call(ctx, op, req, data, resp)
	return meta, err
}
