package wire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
)

// ErrClosed is returned by calls on a connection that has failed or closed.
var ErrClosed = errors.New("connection closed")

// Client is one pipelined connection to a server. Calls from many
// goroutines share it; each waits only for its own response.
type Client struct {
	conn net.Conn

	// wturn serialises frame writes: a one-slot channel rather than a
	// mutex, so a call waiting behind a write its peer does not read
	// gives up with its own context (and, in the simulation's synctest
	// bubble, waits durably: simulated time goes on).
	wturn chan struct{}
	hbuf  [headerBytes]byte

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error         // set once the connection has failed
	done    chan struct{} // closed once the connection has failed

	welcomed chan struct{} // closed when the server's welcome arrives
	welcome  Welcome       // set before welcomed closes
}

type call struct {
	into  []byte // caller's buffer for response data (may be nil)
	meta  []byte
	n     int // response data bytes
	err   error
	ready chan struct{}
}

// Dial connects to addr over TCP.
func Dial(ctx context.Context, addr string) (*Client, error) {
	return DialOn(ctx, TCP{}, addr)
}

// NewClient starts a client on an established connection.
func NewClient(conn net.Conn) *Client {
	c := &Client{conn: conn, pending: map[uint64]*call{}, done: make(chan struct{}), welcomed: make(chan struct{}), wturn: make(chan struct{}, 1)}
	go c.readLoop()
	return c
}

// Err reports why the connection failed, or nil while it is healthy.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close shuts the connection; outstanding calls fail with ErrClosed.
func (c *Client) Close() error {
	c.fail(ErrClosed)
	return nil
}

// Call sends a request and waits for its response. Response data is read
// straight into respData, which must be large enough; the returned n says
// how much arrived. A remote error is returned as *RemoteError.
func (c *Client) Call(ctx context.Context, op uint16, meta, data, respData []byte) (respMeta []byte, n int, err error) {
	return c.CallV(ctx, op, meta, [][]byte{data}, respData)
}

// CallV is Call with the request's data in pieces, sent one after
// another as one frame's data (vectored: nothing is copied to join them).
func (c *Client) CallV(ctx context.Context, op uint16, meta []byte, data [][]byte, respData []byte) (respMeta []byte, n int, err error) {
	cl := &call{into: respData, ready: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, 0, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = cl
	c.mu.Unlock()

	err = c.send(ctx, Header{Kind: KindRequest, Op: op, ID: id}, meta, data)
	if errors.Is(err, errNotSent) {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return nil, 0, err
	}
	if err != nil {
		c.fail(transportErr(err))
		<-cl.ready
		// The answer may have come before the failure (a request sent
		// whole, and the connection broken after): it stands.
		return cl.meta, cl.n, cl.err
	}
	select {
	case <-cl.ready:
		return cl.meta, cl.n, cl.err
	case <-ctx.Done():
		// The reader may be filling cl.into right now; the only safe way
		// to hand the buffer back is to end the connection. An answer that
		// came meanwhile stands.
		c.fail(fmt.Errorf("call abandoned: %w", ctx.Err()))
		<-cl.ready
		if cl.err == nil {
			return cl.meta, cl.n, nil
		}
		return nil, 0, ctx.Err()
	}
}

// errNotSent is a request given up before any of it was written (its
// context ended while it waited for its turn to write).
var errNotSent = errors.New("request not sent")

func (c *Client) send(ctx context.Context, h Header, meta []byte, data [][]byte) error {
	n, crc := 0, uint32(0)
	for _, p := range data {
		n += len(p)
		crc = crc32.Update(crc, castagnoli, p)
		if n > MaxDataBytes {
			return fmt.Errorf("%w: request too large", ErrFrame)
		}
	}
	h.MetaLen, h.DataLen, h.DataCRC = uint32(len(meta)), uint32(n), crc
	if h.MetaLen > MaxMetaBytes {
		return fmt.Errorf("%w: request too large", ErrFrame)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errNotSent, err)
	}
	select {
	case c.wturn <- struct{}{}:
	case <-ctx.Done():
		// Nothing of it written: the connection stays in step.
		return fmt.Errorf("%w: %w", errNotSent, ctx.Err())
	case <-c.done:
		return c.Err()
	}
	defer func() { <-c.wturn }()
	if err := ctx.Err(); err != nil {
		// Ended as the turn came (select picks either): still unwritten.
		return fmt.Errorf("%w: %w", errNotSent, err)
	}
	// A peer that stopped reading blocks the write, which watches no
	// context: the caller's context ending fails the connection (a
	// request half written leaves it out of step anyway), which ends it.
	if ctx.Done() != nil { // one that can end (no registration, no allocation otherwise)
		stop := context.AfterFunc(ctx, func() { c.fail(fmt.Errorf("request abandoned while sending: %w", ctx.Err())) })
		defer stop()
	}
	h.put(c.hbuf[:], meta)
	bufs := make(net.Buffers, 0, 2+len(data))
	bufs = append(bufs, c.hbuf[:], meta)
	bufs = append(bufs, data...)
	_, err := bufs.WriteTo(c.conn)
	return err
}

// transportErr marks a failure of the connection itself (whatever the
// transport calls it: EOF, a reset, a closed pipe) as ErrClosed, so
// callers retry on a new connection; a malformed frame stays ErrFrame.
func transportErr(err error) error {
	var remote *RemoteError
	var op *net.OpError
	switch {
	case errors.Is(err, ErrClosed), errors.Is(err, ErrFrame), errors.As(err, &remote):
		return err
	case errors.Is(err, io.EOF):
		return ErrClosed
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert: the server refused this peer's credential (TLS
		// 1.3 says so only after the client's side of the handshake).
		return &RemoteError{Code: ErrDenied, Msg: "the server refused this client's credential: " + err.Error()}
	}
	return fmt.Errorf("%w: %w", ErrClosed, err)
}

// fail ends the connection once and completes every pending call with err.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = map[uint64]*call{}
	c.mu.Unlock()
	close(c.done)
	_ = c.conn.Close()
	for _, cl := range pending {
		cl.err = err
		close(cl.ready)
	}
}

func (c *Client) readLoop() {
	br := bufio.NewReaderSize(c.conn, 64<<10)
	var hb [headerBytes]byte
	for {
		if err := c.readOne(br, hb[:]); err != nil {
			c.fail(transportErr(err))
			return
		}
	}
}

func (c *Client) readOne(br *bufio.Reader, hb []byte) error {
	if _, err := io.ReadFull(br, hb); err != nil {
		return err
	}
	h, err := parseHeader(hb)
	if err != nil {
		return err
	}
	if h.Kind != KindResponse {
		return fmt.Errorf("%w: request on a client connection", ErrFrame)
	}
	meta := make([]byte, h.MetaLen)
	if _, err := io.ReadFull(br, meta); err != nil {
		return err
	}
	if err := checkHeaderCRC(hb, meta); err != nil {
		return err
	}
	if h.ID == 0 && h.Op == OpHello {
		return c.takeWelcome(h, meta)
	}
	c.mu.Lock()
	cl := c.pending[h.ID]
	delete(c.pending, h.ID)
	c.mu.Unlock()
	if cl == nil {
		return fmt.Errorf("%w: response to unknown request %d", ErrFrame, h.ID)
	}
	cl.meta, cl.n = meta, int(h.DataLen)
	if int(h.DataLen) > len(cl.into) {
		cl.err = fmt.Errorf("%w: response data %d bytes exceeds buffer %d", ErrFrame, h.DataLen, len(cl.into))
		close(cl.ready)
		return cl.err
	}
	if _, err := io.ReadFull(br, cl.into[:h.DataLen]); err != nil {
		cl.err = err
		close(cl.ready)
		return err
	}
	if CRC(cl.into[:h.DataLen]) != h.DataCRC {
		cl.err = fmt.Errorf("%w: response data checksum mismatch", ErrFrame)
		close(cl.ready)
		return cl.err
	}
	if h.Status != OK {
		cl.err = &RemoteError{Code: h.Status, Msg: string(meta)}
		cl.meta, cl.n = nil, 0
	}
	close(cl.ready)
	return nil
}

// takeWelcome takes the server's answer to the hello: a refusal ends the
// connection with the server's reason (an ErrProtocol RemoteError, which
// no caller retries); a welcome must name a version this build speaks.
func (c *Client) takeWelcome(h Header, meta []byte) error {
	select {
	case <-c.welcomed:
		return fmt.Errorf("%w: a second welcome", ErrFrame)
	default:
	}
	if h.DataLen != 0 {
		return fmt.Errorf("%w: welcome with data", ErrFrame)
	}
	if h.Status != OK {
		return &RemoteError{Code: h.Status, Msg: string(meta)}
	}
	w, err := decodeWelcome(meta)
	if err != nil {
		return err
	}
	if w.Version < MinProtocolVersion || w.Version > ProtocolVersion {
		return &RemoteError{Code: ErrProtocol, Msg: fmt.Sprintf("the %s chose braid protocol %d; this client speaks %d to %d", roleOr(w.Role), w.Version, MinProtocolVersion, ProtocolVersion)}
	}
	c.welcome = w
	close(c.welcomed)
	return nil
}

// Welcome is what the handshake settled (zero before it completes).
func (c *Client) Welcome() Welcome {
	select {
	case <-c.welcomed:
		return c.welcome
	default:
		return Welcome{}
	}
}
