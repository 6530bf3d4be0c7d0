package simnet

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// A delayed link delivers every byte, in order, and its writer does not
// wait for delivery (it may hold locks others need meanwhile).
func TestDelayKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		l, err := n.Listen("s:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		n.Delay(l.Addr().String(), time.Second)
		got := make(chan []byte, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				got <- nil
				return
			}
			defer c.Close()
			b, _ := io.ReadAll(c)
			got <- b
		}()
		c, err := n.Dial(context.Background(), l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, s := range []string{"one ", "two ", "three"} {
			if _, err := c.Write([]byte(s)); err != nil {
				t.Fatal(err)
			}
		}
		if time.Since(start) != 0 {
			t.Fatalf("writer waited %v for delivery", time.Since(start))
		}
		synctest.Wait()
		n.Delay(l.Addr().String(), 0)
		<-time.After(2 * time.Second) // everything queued is delivered by now
		c.Close()
		if b := <-got; string(b) != "one two three" {
			t.Fatalf("delivered %q", b)
		}
	})
}

// An isolated server refuses dials until healed.
func TestIsolateRefusesDials(t *testing.T) {
	n := New()
	l, err := n.Listen("s:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n.Isolate(l.Addr().String())
	if _, err := n.Dial(context.Background(), l.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial of an isolated server: %v", err)
	}
	n.Heal(l.Addr().String())
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := n.Dial(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatalf("dial after heal: %v", err)
	}
	c.Close()
}

// A server losing replies cuts the connection as it writes: the client
// never sees the reply, although the server read the request.
func TestLoseRepliesCutsAfterTheRequest(t *testing.T) {
	n := New()
	l, err := n.Listen("s:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n.LoseReplies(l.Addr().String(), 1, 7) // every reply
	served := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			served <- ""
			return
		}
		defer c.Close()
		b := make([]byte, 4)
		_, _ = io.ReadFull(c, b)
		served <- string(b)
		_, _ = c.Write([]byte("pong"))
	}()
	c, err := n.Dial(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if got := <-served; got != "ping" {
		t.Fatalf("server read %q", got)
	}
	if b, err := io.ReadAll(c); len(b) != 0 || err != nil {
		t.Fatalf("client read %q, %v; want nothing and EOF", b, err)
	}
	if got := n.LostReplies(l.Addr().String()); got != 1 {
		t.Fatalf("%d replies counted lost, want 1", got)
	}
	n.LoseReplies(l.Addr().String(), 0, 0)
	if n.LostReplies(l.Addr().String()) != 0 {
		t.Fatal("lost replies still counted after LoseReplies(0)")
	}
}

// Isolating a host's address cuts it off both ways: what it dialled out
// is cut, and it cannot dial out until healed.
func TestIsolateCutsAHostBothWays(t *testing.T) {
	n := New()
	mds, err := n.Listen("mds:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mds.Close()
	go func() {
		for {
			c, err := mds.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	h := n.Host()
	own, err := h.Listen("osd:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	out, err := h.Dial(context.Background(), mds.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	other, err := n.Dial(context.Background(), mds.Addr().String()) // from no host
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	n.Isolate(own.Addr().String())
	if _, err := out.Write([]byte("x")); err == nil {
		t.Fatal("a connection the isolated host dialled still carries writes")
	}
	if _, err := h.Dial(context.Background(), mds.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial out of an isolated host: %v", err)
	}
	if _, err := other.Write([]byte("x")); err != nil {
		t.Fatalf("another host's connection was cut: %v", err)
	}
	n.Heal(own.Addr().String())
	c, err := h.Dial(context.Background(), mds.Addr().String())
	if err != nil {
		t.Fatalf("dial out after heal: %v", err)
	}
	c.Close()
}

// lenFrame frames a stream of messages that each start with their
// length, one byte.
func lenFrame(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(b[0])
}

// A held request cuts its connection at once, and reaches the server
// late, on a connection of its own after its connection's first request,
// and only while the server that was sent it still listens.
func TestDuplicateDeliversAHeldRequestLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		n.SplitRequests(lenFrame)
		l, err := n.Listen("s:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		type got struct {
			at  time.Time
			msg string
		}
		conns := make(chan chan got, 16)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					close(conns)
					return
				}
				msgs := make(chan got, 16)
				conns <- msgs
				go func() {
					defer close(msgs)
					defer c.Close()
					for {
						var size [1]byte
						if _, err := io.ReadFull(c, size[:]); err != nil {
							return
						}
						body := make([]byte, int(size[0])-1)
						if _, err := io.ReadFull(c, body); err != nil {
							return
						}
						msgs <- got{time.Now(), string(body)}
					}
				}()
			}
		}()
		start := time.Now()
		n.Duplicate(addr, 1, 3*time.Second, 1) // every request after the first
		c, err := n.Dial(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("\x06hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("\x06w")); err != nil { // a request in two writes
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("rite")); err == nil {
			t.Fatal("the write of a held request did not fail")
		}
		if n.Duplicated(addr) != 1 {
			t.Fatalf("%d requests held, want 1", n.Duplicated(addr))
		}
		n.Duplicate(addr, 0, 0, 0)
		first := <-conns
		var msgs []string
		for m := range first {
			msgs = append(msgs, m.msg)
		}
		if len(msgs) != 1 || msgs[0] != "hello" {
			t.Fatalf("the cut connection delivered %q, want only the hello", msgs)
		}
		late := <-conns
		var lateMsgs []string
		for m := range late {
			if d := m.at.Sub(start); d < 3*time.Second {
				t.Errorf("%q arrived %v after it was sent, want 3s", m.msg, d)
			}
			lateMsgs = append(lateMsgs, m.msg)
		}
		if len(lateMsgs) != 2 || lateMsgs[0] != "hello" || lateMsgs[1] != "write" {
			t.Fatalf("late connection delivered %q, want hello then write", lateMsgs)
		}

		// A copy held for a server that restarts meanwhile is lost.
		n.Duplicate(addr, 1, 3*time.Second, 2)
		c, err = n.Dial(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("\x06hello\x06write"))
		n.Duplicate(addr, 0, 0, 0)
		for range <-conns {
		}
		l.Close()
		for range conns {
		}
		l2, err := n.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Close()
		go func() {
			if c, err := l2.Accept(); err == nil {
				t.Errorf("a copy held for the old server reached the new one")
				c.Close()
			}
		}()
		<-time.After(5 * time.Second)
		synctest.Wait()
	})
}

// A dial racing its listener's close either fails or yields a connection
// that is already cut: never one left in the closed listener's backlog,
// where nobody reads it and its writer waits for good. (A cluster stopping
// under a resolver that was dialling an OSD hung so; under synctest the
// hang is a deadlock the bubble reports.)
func TestDialRacingCloseNeverStrands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		for i := range 300 {
			l, err := n.Listen("s:0")
			if err != nil {
				t.Fatal(err)
			}
			dialled := make(chan net.Conn, 1)
			go func() {
				c, _ := n.Dial(context.Background(), l.Addr().String())
				dialled <- c
			}()
			l.Close()
			c := <-dialled
			if c == nil {
				continue
			}
			// Bigger than any buffer: only a reader or a cut ends it.
			if _, err := c.Write(make([]byte, 1<<16)); err == nil {
				t.Fatalf("round %d: a write to a closed listener's connection succeeded", i)
			}
			c.Close()
		}
	})
}
