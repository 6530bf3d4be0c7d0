package simnet

import (
	"context"
	"errors"
	"io"
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
