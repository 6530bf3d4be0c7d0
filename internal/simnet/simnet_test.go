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
