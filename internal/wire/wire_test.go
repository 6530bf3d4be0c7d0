package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func startServer(t *testing.T, h Handler) string {
	t.Helper()
	_, addr := startLimited(t, h, DefaultLimits)
	return addr
}

// echo returns the request data reversed in blocks, and meta upper-cased by
// op; op 9 fails with ErrNotFound.
func echo(_ context.Context, r *Request) (Response, error) {
	if r.Op == 9 {
		return Response{}, Errorf(ErrNotFound, "no object %s", r.Meta)
	}
	return Response{Meta: bytes.ToUpper(r.Meta), Data: bytes.Clone(r.Data)}, nil
}

func TestPipelinedCalls(t *testing.T) {
	addr := startServer(t, echo)
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			data := bytes.Repeat([]byte{byte(i)}, 1000*i)
			out := make([]byte, len(data))
			meta, n, err := c.Call(context.Background(), 1, []byte(fmt.Sprintf("req%d", i)), data, out)
			if err != nil {
				errs <- err
				return
			}
			if string(meta) != fmt.Sprintf("REQ%d", i) || n != len(data) || !bytes.Equal(out, data) {
				errs <- fmt.Errorf("call %d: got meta %q n %d", i, meta, n)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A request's data sent in pieces arrives as one frame's data, its
// checksum over all of them (the server refuses a frame whose data does
// not match it); pieces that together pass MaxDataBytes are refused
// before anything is sent.
func TestVectoredCall(t *testing.T) {
	addr := startServer(t, echo)
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pieces := [][]byte{[]byte("first "), nil, bytes.Repeat([]byte("x"), 70000), []byte(" last")}
	want := bytes.Join(pieces, nil)
	out := make([]byte, len(want))
	if _, n, err := c.CallV(context.Background(), 1, []byte("v"), pieces, out); err != nil || n != len(want) || !bytes.Equal(out, want) {
		t.Fatalf("vectored call: %d bytes, %v; data equal %v", n, err, bytes.Equal(out[:n], want))
	}
	big := make([]byte, MaxDataBytes/2+1)
	if _, _, err := c.CallV(context.Background(), 1, nil, [][]byte{big, big}, nil); !errors.Is(err, ErrFrame) {
		t.Fatalf("pieces past MaxDataBytes: %v, want ErrFrame", err)
	}
}

func TestRemoteErrorCode(t *testing.T) {
	addr := startServer(t, echo)
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, err = c.Call(context.Background(), 9, []byte("x"), nil, nil)
	var re *RemoteError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &re) || re.Msg != "not found: no object x" {
		t.Fatalf("err = %v, want ErrNotFound with message", err)
	}
	// The connection survives an error response.
	if _, _, err := c.Call(context.Background(), 1, []byte("ok"), nil, nil); err != nil {
		t.Fatal(err)
	}
}

// A reply too large for a frame is an explicit error, never cut to fit
// (a listing once came back cut, and failed to decode), and the
// connection goes on.
func TestOversizedReplyIsAnError(t *testing.T) {
	addr := startServer(t, func(_ context.Context, r *Request) (Response, error) {
		return Response{Meta: make([]byte, MaxMetaBytes+int(r.Meta[0]))}, nil
	})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	meta, _, err := c.Call(context.Background(), 1, []byte{1}, nil, nil)
	if !errors.Is(err, ErrOverflow) {
		t.Fatalf("a reply one byte too large: %d bytes, err %v; want ErrOverflow", len(meta), err)
	}
	if meta, _, err := c.Call(context.Background(), 1, []byte{0}, nil, nil); err != nil || len(meta) != MaxMetaBytes {
		t.Fatalf("a reply of the largest size after it: %d bytes, %v", len(meta), err)
	}
}

// TestMalformedFramesCloseConnection sends hostile byte streams after a
// handshake; the server must drop the connection and keep serving others.
func TestMalformedFramesCloseConnection(t *testing.T) {
	addr := startServer(t, echo)
	good := AppendFrame(nil, Header{Kind: KindRequest, Op: 1, ID: 1}, []byte("m"), []byte("data"))
	corruptData := bytes.Clone(good)
	corruptData[len(corruptData)-1] ^= 1
	corruptMeta := bytes.Clone(good)
	corruptMeta[headerBytes] ^= 1
	huge := bytes.Clone(good)
	huge[20], huge[21], huge[22], huge[23] = 0xff, 0xff, 0xff, 0x7f
	for name, stream := range map[string][]byte{
		"garbage":      []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxx"),
		"truncated":    good[:len(good)-2],
		"bad data crc": corruptData,
		"bad meta crc": corruptMeta,
		"huge length":  huge,
		"response":     AppendFrame(nil, Header{Kind: KindResponse, ID: 1}, nil, nil),
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		hello := AppendFrame(nil, Header{Kind: KindRequest, Op: OpHello}, helloMeta(NewPeerID(), 1), nil)
		if _, err := conn.Write(append(hello, stream...)); err != nil {
			t.Fatal(err)
		}
		if tc, ok := conn.(*net.TCPConn); ok && name == "truncated" {
			_ = tc.CloseWrite()
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if w, err := ReadFrame(conn); err != nil || w.Header.Status != OK || w.Header.Op != OpHello {
			t.Fatalf("%s: no welcome: %+v, %v", name, w.Header, err)
		}
		f, err := ReadFrame(conn)
		if err == nil {
			t.Errorf("%s: server answered %+v instead of closing", name, f.Header)
		} else if errors.Is(err, ErrFrame) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// closed as required
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: server neither answered nor closed", name)
		}
		conn.Close()
	}
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Call(context.Background(), 1, nil, []byte("still alive"), make([]byte, 11)); err != nil {
		t.Fatalf("server stopped serving after hostile peers: %v", err)
	}
}

func TestPanickingHandlerIsContained(t *testing.T) {
	addr := startServer(t, func(ctx context.Context, r *Request) (Response, error) {
		if r.Op == 2 {
			var m map[string]int
			m["x"] = 1 // deliberate nil-map panic
		}
		return Response{}, nil
	})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Call(context.Background(), 2, nil, nil, nil); !errors.Is(err, ErrInternal) {
		t.Fatalf("err = %v, want ErrInternal", err)
	}
	if _, _, err := c.Call(context.Background(), 1, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCallAfterServerGone(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	s := NewServer(echo, slog.New(slog.NewTextHandler(io.Discard, nil)), DefaultLimits)
	go s.Serve(context.Background(), ln)
	c, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Err() == nil && time.Now().Before(deadline) {
		_, _, _ = c.Call(context.Background(), 1, nil, nil, nil)
	}
	if c.Err() == nil {
		t.Fatal("client never noticed the server closing")
	}
}

func TestCodec(t *testing.T) {
	var e Enc
	e.U8(7)
	e.U32(1 << 30)
	e.U64(1 << 60)
	e.I64(-5)
	e.Bytes([]byte("cap"))
	d := NewDec(e.B)
	if d.U8() != 7 || d.U32() != 1<<30 || d.U64() != 1<<60 || d.I64() != -5 || string(d.Bytes()) != "cap" || d.Err() != nil {
		t.Fatal("codec round trip failed")
	}
	d = NewDec(e.B[:10])
	d.U8()
	d.U64()
	d.U64()
	if !errors.Is(d.Err(), ErrBadRequest) {
		t.Fatal("short meta not reported")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Header{Kind: KindRequest, Op: 1, ID: 7}, []byte("meta"), []byte("data")))
	f.Add(AppendFrame(nil, Header{Kind: KindResponse, Status: ErrCorrupt}, []byte("bad"), nil))
	f.Add([]byte("BRD1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ReadFrame(bytes.NewReader(b))
		if err != nil {
			return
		}
		again := AppendFrame(nil, fr.Header, fr.Meta, fr.Data)
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("re-encoding a decoded frame differs")
		}
	})
}

func FuzzDec(f *testing.F) {
	var e Enc
	e.U64(1)
	e.Bytes([]byte("x"))
	f.Add(e.B)
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDec(b)
		d.U64()
		d.Bytes()
		d.U32()
		_ = d.Err()
	})
}

// A call to a peer that stopped reading (its buffers full, or a link
// that swallows bytes) ends when its context does, even while its
// request is still being written: a caller's deadline bounds the whole
// call, and the connection, no longer in step, is failed.
func TestCallEndsWithItsContextWhileSending(t *testing.T) {
	// Under synctest a call that hangs is a deadlock the bubble reports.
	synctest.Test(t, func(t *testing.T) {
		client, server := net.Pipe() // unbuffered: nothing is written unless read
		defer server.Close()
		c := NewClient(client)
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := c.Call(ctx, 1, nil, make([]byte, 1<<16), nil)
			done <- err
		}()
		synctest.Wait() // the call is blocked writing
		cancel()
		if err := <-done; err == nil {
			t.Fatal("a call nobody read succeeded")
		}
		if c.Err() == nil {
			t.Fatal("the connection stayed in use with a request half written")
		}
	})
}

// A call waiting for its turn behind a write its peer does not read gives
// up with its own context, without writing anything: the connection stays
// in step for the call ahead of it.
func TestCallWaitingToSendEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, server := net.Pipe()
		defer server.Close()
		c := NewClient(client)
		defer c.Close()
		go func() { _, _, _ = c.Call(context.Background(), 1, nil, make([]byte, 1<<16), nil) }()
		synctest.Wait() // the first call holds the turn, blocked writing
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := c.Call(ctx, 1, nil, nil, nil)
			done <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a call given up while waiting to send: %v, want context.Canceled", err)
		}
		if err := c.Err(); err != nil {
			t.Fatalf("the connection failed with a call that never wrote: %v", err)
		}
	})
}
