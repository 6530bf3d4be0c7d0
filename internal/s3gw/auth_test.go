package s3gw_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/braidfs/braid/internal/testcluster"
)

func hmacSHA256(k []byte, d string) []byte {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(d))
	return h.Sum(nil)
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// chunkedPut sends payload as a signed aws-chunked PUT
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, what SDKs send for streams of
// unknown hash), in chunks of chunkSize, each chunk signed after the one
// before; tamper flips one byte of the second chunk after signing.
func (e *env) chunkedPut(t *testing.T, bucket, key string, payload []byte, chunkSize int, tamper bool) (int, string) {
	t.Helper()
	now := time.Now().UTC()
	amzDate, day := now.Format("20060102T150405Z"), now.Format("20060102")
	var chunks [][]byte
	for rest := payload; len(rest) > 0; {
		n := min(chunkSize, len(rest))
		chunks, rest = append(chunks, rest[:n]), rest[n:]
	}
	chunks = append(chunks, nil) // the final, empty chunk
	encLen := 0
	for _, c := range chunks {
		encLen += len(fmt.Sprintf("%x;chunk-signature=", len(c))) + 64 + 2 + len(c) + 2
	}
	req, err := http.NewRequest("PUT", "http://"+e.srv.Addr()+"/"+bucket+"/"+key, nil)
	if err != nil {
		t.Fatal(err)
	}
	const streaming = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	req.Header.Set("X-Amz-Content-Sha256", streaming)
	req.Header.Set("X-Amz-Decoded-Content-Length", fmt.Sprint(len(payload)))
	req.Header.Set("Content-Encoding", "aws-chunked")
	req.ContentLength = int64(encLen)
	creds := aws.Credentials{AccessKeyID: e.key.AccessKey, SecretAccessKey: e.key.SecretKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, streaming, "s3", "us-east-1", now); err != nil {
		t.Fatal(err)
	}
	prev := regexp.MustCompile(`Signature=([0-9a-f]+)`).FindStringSubmatch(req.Header.Get("Authorization"))[1]
	signingKey := hmacSHA256(hmacSHA256(hmacSHA256(hmacSHA256([]byte("AWS4"+e.key.SecretKey), day), "us-east-1"), "s3"), "aws4_request")
	scope := day + "/us-east-1/s3/aws4_request"
	var body bytes.Buffer
	for i, c := range chunks {
		sts := "AWS4-HMAC-SHA256-PAYLOAD\n" + amzDate + "\n" + scope + "\n" + prev + "\n" + sha256hex(nil) + "\n" + sha256hex(c)
		sig := hex.EncodeToString(hmacSHA256(signingKey, sts))
		fmt.Fprintf(&body, "%x;chunk-signature=%s\r\n", len(c), sig)
		if tamper && i == 1 {
			c = append([]byte{c[0] ^ 1}, c[1:]...)
		}
		body.Write(c)
		body.WriteString("\r\n")
		prev = sig
	}
	req.Body = io.NopCloser(&body)
	return doHTTP(t, req)
}

// TestSignatureVariants: the SigV4 forms SDKs send, and what a wrong
// signature gets.
func TestSignatureVariants(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	bucket := "sig"
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	payload := randBytes(5, 200_000)
	if code, body := e.chunkedPut(t, bucket, "chunked", payload, 64<<10, false); code != http.StatusOK {
		t.Fatalf("signed chunked PUT: %d %s", code, body)
	}
	if got, out := e.getBytes(t, bucket, "chunked"); !bytes.Equal(got, payload) || aws.ToString(out.ETag) != md5hex(payload) {
		t.Fatalf("chunked object: %d bytes, equal %v, ETag %s", len(got), bytes.Equal(got, payload), aws.ToString(out.ETag))
	}
	if code, body := e.chunkedPut(t, bucket, "tampered", payload, 64<<10, true); code != http.StatusForbidden || !strings.Contains(body, "SignatureDoesNotMatch") {
		t.Fatalf("chunked PUT with a tampered chunk: %d %s", code, body)
	}
	_, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("tampered")})
	wantCode(t, "HEAD of the tampered PUT's key", err, "NotFound")

	unsigned := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + e.srv.Addr()), UsePathStyle: true,
		Credentials: e.s3.Options().Credentials}, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
	if _, err := unsigned.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("unsigned"), Body: bytes.NewReader(payload)}); err != nil {
		t.Fatalf("UNSIGNED-PAYLOAD PUT: %v", err)
	}
	if got, _ := e.getBytes(t, bucket, "unsigned"); !bytes.Equal(got, payload) {
		t.Fatal("UNSIGNED-PAYLOAD object differs")
	}

	// Presigned GET and PUT, and a presigned URL with its signature altered.
	ps := s3.NewPresignClient(e.s3)
	put, err := ps.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("presigned")})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", put.URL, bytes.NewReader([]byte("by presigned URL")))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT: %v %v", resp, err)
	}
	get, err := ps.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("presigned")})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := httpGet(t, get.URL); code != http.StatusOK || body != "by presigned URL" {
		t.Fatalf("presigned GET: %d %q", code, body)
	}
	forged := regexp.MustCompile(`X-Amz-Signature=[0-9a-f]{4}`).ReplaceAllString(get.URL, "X-Amz-Signature=0000")
	if code, body := httpGet(t, forged); code != http.StatusForbidden || !strings.Contains(body, "SignatureDoesNotMatch") {
		t.Fatalf("presigned GET with an altered signature: %d %s", code, body)
	}

	wrong := client(e.srv.Addr(), e.key.AccessKey, "not-the-secret")
	_, err = wrong.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("chunked")})
	wantCode(t, "GET signed with a wrong secret", err, "SignatureDoesNotMatch")
	unknown := client(e.srv.Addr(), "AKNOBODY", "x")
	_, err = unknown.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: aws.String("chunked")})
	wantCode(t, "GET with an unknown access key", err, "InvalidAccessKeyId")
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return doHTTP(t, req)
}

// doHTTP sends a raw request and returns its status and body.
func doHTTP(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestClientGoneMidPut: a client that disconnects in the middle of a PUT
// leaves no object, not even a partial one, and no temporary file.
func TestClientGoneMidPut(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	bucket := "cut"
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	// An earlier version of the key must survive the broken PUT whole.
	old := []byte("the old object")
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: bytes.NewReader(old)}); err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	req, _ := http.NewRequest("PUT", "http://"+e.srv.Addr()+"/"+bucket+"/k", nil)
	req.ContentLength = size
	req.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
	creds := aws.Credentials{AccessKeyID: e.key.AccessKey, SecretAccessKey: e.key.SecretKey}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "PUT /%s/k HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", bucket, req.Host, size)
	for k, v := range req.Header {
		fmt.Fprintf(&head, "%s: %s\r\n", k, v[0])
	}
	head.WriteString("\r\n")
	if _, err := conn.Write(head.Bytes()); err != nil {
		t.Fatal(err)
	}
	chunk := randBytes(6, 1<<20)
	for sent := 0; sent < size/2; sent += len(chunk) {
		if _, err := conn.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	// The gateway has begun writing the object's temporary file.
	testcluster.Eventually(t, 30*time.Second, func() bool {
		ents, err := e.cl.ReadDir(ctx, "/cut/.braid-s3/tmp")
		return err == nil && len(ents) == 1
	}, func() string { return "no temporary file while the PUT streams" })
	conn.Close()
	testcluster.Eventually(t, 30*time.Second, func() bool {
		ents, err := e.cl.ReadDir(ctx, "/cut/.braid-s3/tmp")
		return err == nil && len(ents) == 0
	}, func() string { return "the broken PUT's temporary file was left behind" })
	if got, _ := e.getBytes(t, bucket, "k"); !bytes.Equal(got, old) {
		t.Fatalf("after a broken PUT the key holds %d bytes, want the old object", len(got))
	}
	lo, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil || len(lo.Contents) != 1 {
		t.Fatalf("listing after a broken PUT: %+v %v", lo, err)
	}
}
