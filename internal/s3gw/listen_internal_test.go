package s3gw

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

// A PUT sent with "Expect: 100-continue" (the AWS SDKs' large uploads)
// was taken, once the gateway wrote its 100 Continue, for a new request
// whose header never ended: its whole body, ranked with slowloris, went
// first when the gateway was full, and its reads had no progress bound.
func TestContinueIsNoAnswer(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	l := newLimitListener(nil, 8, 8, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c := &trackedConn{Conn: server, l: l, addr: "pipe", accepted: time.Now().UnixNano()}
	go func() {
		_, _ = client.Write([]byte("PUT /b/k HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"))
		_, _ = io.ReadFull(client, make([]byte, len("HTTP/1.1 100 Continue\r\n\r\n")))
		_, _ = client.Write([]byte("body"))
	}()
	buf := make([]byte, 4096)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	if c.inHeader.Load() || !c.inRequest() {
		t.Fatalf("after the header: in header %v, in request %v", c.inHeader.Load(), c.inRequest())
	}
	if _, err := c.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf[:4]); err != nil {
		t.Fatal(err)
	}
	if c.inHeader.Load() || !c.inRequest() {
		t.Fatalf("reading the body after a 100 Continue: in header %v, in request %v; want the same request, its header whole", c.inHeader.Load(), c.inRequest())
	}
	if rank, _ := c.evictRank(time.Now().UnixNano()); rank != 0 {
		t.Fatalf("an upload at pace ranks %d for eviction; want never (0)", rank)
	}
}
