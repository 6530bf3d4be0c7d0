package wire

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

func helloMeta(id, gen uint64) []byte {
	return Hello{Peer: id, Gen: gen, MinVersion: MinProtocolVersion, MaxVersion: ProtocolVersion}.encode()
}

// rawExchange writes stream to a new connection to addr and returns the
// first n responses, or those the server sent before it closed the
// connection.
func rawExchange(t *testing.T, addr string, stream []byte, n int) []struct {
	h    Header
	meta string
} {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(stream); err != nil {
		t.Fatal(err)
	}
	var out []struct {
		h    Header
		meta string
	}
	br := bufio.NewReader(conn)
	for len(out) < n {
		var hb [headerBytes]byte
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the server did not close the connection: %v", err)
			}
			return out
		}
		h, err := parseHeader(hb[:])
		if err != nil {
			t.Fatal(err)
		}
		meta := make([]byte, h.MetaLen+h.DataLen)
		if _, err := io.ReadFull(br, meta); err != nil {
			t.Fatal(err)
		}
		out = append(out, struct {
			h    Header
			meta string
		}{h, string(meta[:h.MetaLen])})
	}
	return out
}

// Every connection starts with a handshake that names the protocol
// version, the features both sides have and the server's role. A client
// that skips it, speaks only protocol 1 (the old 16-byte hello), speaks
// only versions the server does not, or offers credentials the server
// cannot check is told why in an ErrProtocol answer, and the connection
// closes; the server goes on serving others.
func TestHandshake(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(echo, slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultLimits)
	s.Identify(RoleMDS, 0b101)
	go s.Serve(context.Background(), ln)
	defer s.Close()
	addr := ln.Addr().String()

	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Welcome(); w.Version != ProtocolVersion || w.Role != RoleMDS || w.Features != 0 {
		t.Errorf("welcome %+v: want version %d, role mds, no features (the client offered none)", w, ProtocolVersion)
	}
	c.Close()

	hello := func(h Hello) []byte { return AppendFrame(nil, Header{Kind: KindRequest, Op: OpHello}, h.encode(), nil) }
	ok := Hello{Peer: 7, Gen: 1, MinVersion: MinProtocolVersion, MaxVersion: ProtocolVersion + 5, Features: 0b110}
	got := rawExchange(t, addr, append(hello(ok), AppendFrame(nil, Header{Kind: KindRequest, Op: 1, ID: 1}, []byte("x"), nil)...), 2)
	if len(got) != 2 || got[0].h.Status != OK || got[0].h.ID != 0 || got[1].h.ID != 1 || got[1].h.Status != OK {
		t.Fatalf("a good hello: %+v", got)
	}
	if w, err := decodeWelcome([]byte(got[0].meta)); err != nil || w.Version != ProtocolVersion || w.Features != 0b100 || w.Role != RoleMDS {
		t.Errorf("welcome to a newer client offering features 110: %+v, %v; want version %d, features 100", w, err, ProtocolVersion)
	}

	for name, c := range map[string]struct {
		stream []byte
		want   string
	}{
		"no hello":                {AppendFrame(nil, Header{Kind: KindRequest, Op: 1, ID: 5}, []byte("x"), nil), "before the handshake"},
		"protocol 1":              {AppendFrame(nil, Header{Kind: KindRequest, Op: OpHello}, make([]byte, 16), nil), "protocol 1"},
		"only newer":              {hello(Hello{Peer: 1, Gen: 1, MinVersion: ProtocolVersion + 1, MaxVersion: ProtocolVersion + 3}), "upgrade the older one"},
		"only older":              {hello(Hello{Peer: 1, Gen: 1, MinVersion: 0, MaxVersion: MinProtocolVersion - 1}), "upgrade the older one"},
		"credentials":             {hello(Hello{Peer: 1, Gen: 1, MinVersion: 2, MaxVersion: 2, Auth: []byte("token")}), "credentials"},
		"versions upside down":    {hello(Hello{Peer: 1, Gen: 1, MinVersion: 3, MaxVersion: 2}), "versions 3 to 2"},
		"zero peer":               {hello(Hello{Gen: 1, MinVersion: 2, MaxVersion: 2}), "without a peer"},
		"hello with data":         {AppendFrame(nil, Header{Kind: KindRequest, Op: OpHello}, helloMeta(1, 1), []byte("x")), "with data"},
		"request with data first": {AppendFrame(nil, Header{Kind: KindRequest, Op: 1, ID: 3}, []byte("x"), []byte("data")), "before the handshake"},
		"auth too long":           {AppendFrame(nil, Header{Kind: KindRequest, Op: OpHello}, append(helloMeta(1, 1)[:28], 0xff, 0xff), nil), "credentials"},
	} {
		got := rawExchange(t, addr, c.stream, 2)
		if len(got) != 1 || got[0].h.Status != ErrProtocol || !strings.Contains(got[0].meta, c.want) {
			t.Errorf("%s: answered %+v; want one ErrProtocol answer saying %q", name, got, c.want)
		}
	}

	c, err = Dial(context.Background(), addr)
	if err != nil {
		t.Fatalf("the server stopped serving: %v", err)
	}
	defer c.Close()
	if _, _, err := c.Call(context.Background(), 1, []byte("ok"), nil, nil); err != nil {
		t.Fatalf("the server stopped serving: %v", err)
	}
}

// A client refuses a welcome it cannot speak, and a refusal reaches the
// caller as the server's ErrProtocol reason, not as a broken connection
// to retry.
func TestHandshakeRefusalsReachTheCaller(t *testing.T) {
	for name, answer := range map[string][]byte{
		"a version this client does not speak": AppendFrame(nil, Header{Kind: KindResponse, Op: OpHello},
			Welcome{Version: ProtocolVersion + 1, Role: RoleOSD}.encode(), nil),
		"a refusal": AppendFrame(nil, Header{Kind: KindResponse, Op: OpHello, Status: ErrProtocol}, []byte("go away"), nil),
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = conn.Write(answer)
			_, _ = io.Copy(io.Discard, conn)
		}()
		_, err = Dial(context.Background(), ln.Addr().String())
		ln.Close()
		if !errors.Is(err, ErrProtocol) || errors.Is(err, ErrClosed) {
			t.Errorf("%s: dial: %v; want ErrProtocol, not ErrClosed", name, err)
		}
	}
}

// failLastWrite is a client connection whose last write of a request
// (the empty data piece) fails, but only once the server's answer to the
// request has been read: the request arrived whole, the answer came, and
// the connection broke after.
type failLastWrite struct {
	net.Conn
	writes int
	c      *Client
}

func (f *failLastWrite) Write(p []byte) (int, error) {
	f.writes++
	if f.writes == 5 { // hello: header, meta; request: header, meta, data
		f.c.mu.Lock()
		cl := f.c.pending[1] // registered before its first piece was sent
		f.c.mu.Unlock()
		if cl != nil {
			select {
			case <-cl.ready: // the answer has been read
			case <-time.After(10 * time.Second):
			}
		}
		return 0, net.ErrClosed
	}
	return f.Conn.Write(p)
}

// A call whose answer arrived is answered, even if sending the request's
// last (empty) piece failed afterwards: it returned no answer and no
// error, which a caller decoded as an empty reply ("bad request: EOF",
// found by TestMutationsRunOnceDespiteLostReplies).
func TestAnswerBeforeASendErrorIsKept(t *testing.T) {
	addr := startServer(t, echo)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &failLastWrite{Conn: conn}
	c := NewClient(f)
	f.c = c
	defer c.Close()
	if err := c.send(context.Background(), Header{Kind: KindRequest, Op: OpHello}, helloMeta(NewPeerID(), 1), nil); err != nil {
		t.Fatal(err)
	}
	meta, _, err := c.Call(context.Background(), 1, []byte("ping"), nil, nil)
	if err != nil || string(meta) != "PING" {
		t.Fatalf("call answered %q, %v; want the echo, which arrived", meta, err)
	}
}
