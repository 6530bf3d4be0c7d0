package s3gw_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/braidfs/braid/internal/s3gw"
	"github.com/braidfs/braid/internal/testcluster"
)

// 1,024 idle sockets made the gateway answer 503 to everyone. Now twice
// that many cost a real client nothing, during the flood and after.
func TestIdleSocketsDoNotStarveS3(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("flood")}); err != nil {
		t.Fatal(err)
	}
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	roundTrip := func(key string) {
		t.Helper()
		if err := e.roundTrip(ctx, "flood", key); err != nil {
			t.Fatalf("with %d idle sockets open: %v", len(flood), err)
		}
	}
	for i := 0; i < 2048; i++ {
		c, err := net.Dial("tcp", e.srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
		if i%512 == 511 {
			roundTrip("during" + string(rune('a'+i/512)))
		}
	}
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	roundTrip("after")
}

// roundTrip puts an object as a new client (its own connections, none
// kept from before, no retries) and reads it back.
func (e *env) roundTrip(ctx context.Context, bucket, key string) error {
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + e.srv.Addr()), UsePathStyle: true,
		Credentials:      credentials.NewStaticCredentialsProvider(e.key.AccessKey, e.key.SecretKey, ""),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	body := bytes.Repeat([]byte(key), 1000)
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("get %s: %w", key, err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		return fmt.Errorf("get %s: %d bytes, %v", key, len(got), err)
	}
	return nil
}

// slowHeader opens a connection from local address src that sends most
// of a request's header and then nothing: slowloris.
func slowHeader(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte("GET /b/k HTTP/1.1\r\nHost: x\r\n")); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// slowFlood keeps n slow-header connections from src open until stop,
// opening a new one as each is closed (at most maxReopen times each).
func slowFlood(src, addr string, n int, stop <-chan struct{}, wg *sync.WaitGroup) {
	const maxReopen = 200
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for try := 0; try < maxReopen; try++ {
				c, err := slowHeader(src, addr)
				if err != nil {
					return
				}
				closed := make(chan struct{})
				go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
				select {
				case <-stop:
					c.Close()
					<-closed
					return
				case <-closed:
					c.Close()
				}
			}
		}()
	}
}

// Connections in the middle of a request's header had a minute's grace
// that every byte restarted: slow clients from four addresses, reopening
// what was closed, filled the gateway, and every real PUT and GET failed
// until they left.
func TestSlowClientsDoNotSilenceS3(t *testing.T) {
	const maxConns = 64
	e := startWith(t, s3gw.Config{Listen: "127.0.0.1:0", MaxConnections: maxConns})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("slow")}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	for _, src := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.1"} {
		slowFlood(src, e.srv.Addr(), maxConns/4+4, stop, &wg)
	}
	// Once the slow ones have stalled past the grace a real request
	// gets, they make room: a real client gets in, and then every one
	// does, each a new client at its first try.
	var last error
	testcluster.Eventually(t, time.Minute, func() bool {
		last = e.roundTrip(ctx, "slow", "first")
		return last == nil
	}, func() string { return fmt.Sprintf("a real client through the slow ones: %v", last) })
	for i := 0; i < 8; i++ {
		if err := e.roundTrip(ctx, "slow", fmt.Sprintf("during%d", i)); err != nil {
			t.Fatalf("real client %d through the slow ones: %v", i, err)
		}
	}
}

// A request's header must arrive within headerTimeout of its first byte,
// however empty the gateway is.
func TestSlowHeaderClosed(t *testing.T) {
	e := start(t)
	c, err := slowHeader("127.0.0.1", e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("a slow header's connection was not closed: %v", err)
	}
}
