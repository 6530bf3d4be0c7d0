package s3gw_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
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
		// A new client: its own connections, none kept from before.
		s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + e.srv.Addr()), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(e.key.AccessKey, e.key.SecretKey, ""),
			HTTPClient:  &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
		body := bytes.Repeat([]byte(key), 1000)
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("flood"), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
			t.Fatalf("put %s with %d idle sockets open: %v", key, len(flood), err)
		}
		out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("flood"), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("get %s with %d idle sockets open: %v", key, len(flood), err)
		}
		got, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("get %s: %v", key, err)
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
