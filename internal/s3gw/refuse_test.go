package s3gw_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Server-side encryption was accepted and ignored: a PUT with SSE-C
// headers answered 200 and a GET without the key returned the
// plaintext; an SSE-KMS PUT answered 200 without the encryption header.
// The gateway does not implement SSE, so it refuses every request that
// asks for it, and stores nothing.
func TestServerSideEncryptionRefused(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("sse")}); err != nil {
		t.Fatal(err)
	}
	key := bytes.Repeat([]byte{7}, 32)
	sum := md5.Sum(key)
	sseC := func(in *s3.PutObjectInput) {
		in.SSECustomerAlgorithm = aws.String("AES256")
		in.SSECustomerKey = aws.String(base64.StdEncoding.EncodeToString(key))
		in.SSECustomerKeyMD5 = aws.String(base64.StdEncoding.EncodeToString(sum[:]))
	}
	for _, tc := range []struct {
		name string
		set  func(*s3.PutObjectInput)
	}{
		{"SSE-C", sseC},
		{"SSE-KMS", func(in *s3.PutObjectInput) { in.ServerSideEncryption = types.ServerSideEncryptionAwsKms }},
		{"SSE-S3", func(in *s3.PutObjectInput) { in.ServerSideEncryption = types.ServerSideEncryptionAes256 }},
	} {
		in := &s3.PutObjectInput{Bucket: aws.String("sse"), Key: aws.String(tc.name), Body: bytes.NewReader([]byte("secret"))}
		tc.set(in)
		_, err := e.s3.PutObject(ctx, in)
		wantCode(t, "PUT with "+tc.name, err, "NotImplemented")
		_, err = e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("sse"), Key: aws.String(tc.name)})
		wantCode(t, "a refused "+tc.name+" PUT's object", err, "NotFound")
	}
	_, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("sse"), Key: aws.String("mp"),
		ServerSideEncryption: types.ServerSideEncryptionAwsKms})
	wantCode(t, "multipart upload with SSE-KMS", err, "NotImplemented")
	// A plain object read with SSE-C headers is refused too, not served.
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("sse"), Key: aws.String("plain"), Body: bytes.NewReader([]byte("plain"))}); err != nil {
		t.Fatal(err)
	}
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("sse"), Key: aws.String("plain"),
		SSECustomerAlgorithm: aws.String("AES256"), SSECustomerKey: aws.String(base64.StdEncoding.EncodeToString(key)),
		SSECustomerKeyMD5: aws.String(base64.StdEncoding.EncodeToString(sum[:]))})
	wantCode(t, "GET with SSE-C", err, "NotImplemented")
	out, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("sse"), Key: aws.String("plain")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != "plain" {
		t.Fatalf("plain GET: %q", got)
	}
}

// S3's bucket naming rules: an invalid name such as foo-.bar was
// accepted.
func TestInvalidBucketNamesRefused(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	for _, name := range []string{"foo-.bar", "foo.-bar", "foo..bar", "192.168.5.4", "xn--bucket", "bucket-s3alias", "bucket--ol-s3", "ab", "-abc", "abc-", "Abc"} {
		_, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
		wantCode(t, "create bucket "+name, err, "InvalidBucketName")
	}
	for _, name := range []string{"foo-bar.baz", "a.b-c", "123", "my.bucket.1"} {
		if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
			t.Errorf("create bucket %s: %v", name, err)
		}
	}
}

// A PutBucketAcl granting an account nobody has answered 500.
func TestGrantToUnknownAccount(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("acl")}); err != nil {
		t.Fatal(err)
	}
	_, err := e.s3.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("acl"), GrantRead: aws.String("NOSUCHACCOUNT")})
	wantCode(t, "grant to an unknown account", err, "InvalidArgument")
}
