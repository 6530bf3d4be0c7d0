package s3gw_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/s3gw"
	"github.com/braidfs/braid/internal/testcluster"
)

type env struct {
	c   *testcluster.Cluster
	cl  *braid.Client
	srv *s3gw.Server
	s3  *s3.Client
	key braid.S3User
}

func start(t testing.TB) *env {
	t.Helper()
	return startWith(t, s3gw.Config{Listen: "127.0.0.1:0"})
}

func startWith(t testing.TB, cfg s3gw.Config) *env {
	t.Helper()
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	srv, err := s3gw.Start(ctx, cl, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close gateway: %v", err)
		}
	})
	u, err := cl.S3UserAdd(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	return &env{c: c, cl: cl, srv: srv, key: u, s3: client(srv.Addr(), u.AccessKey, u.SecretKey)}
}

func client(addr, access, secret string) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + addr), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, "")})
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("%s: err %v, want %s", what, err, code)
	}
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return `"` + hex.EncodeToString(s[:]) + `"`
}

func TestObjectsAndBuckets(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("data")}); err != nil {
		t.Fatal(err)
	}
	_, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("data")})
	wantCode(t, "second CreateBucket", err, "BucketAlreadyOwnedByYou")
	lb, err := e.s3.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil || len(lb.Buckets) != 1 || aws.ToString(lb.Buckets[0].Name) != "data" {
		t.Fatalf("ListBuckets: %+v %v", lb, err)
	}

	body := bytes.Repeat([]byte("object body "), 50_000) // 600 KB: erasure coded
	put, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin"),
		Body: bytes.NewReader(body), ContentType: aws.String("application/x-test"), Metadata: map[string]string{"color": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(put.ETag) != md5hex(body) {
		t.Fatalf("ETag %s, want the MD5 %s", aws.ToString(put.ETag), md5hex(body))
	}
	got, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if !bytes.Equal(b, body) || aws.ToString(got.ContentType) != "application/x-test" || got.Metadata["color"] != "blue" {
		t.Fatalf("GET: %d bytes (equal %v), type %q, meta %v", len(b), bytes.Equal(b, body), aws.ToString(got.ContentType), got.Metadata)
	}
	rng, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin"), Range: aws.String("bytes=100-199")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(rng.Body)
	rng.Body.Close()
	if !bytes.Equal(b, body[100:200]) || aws.ToString(rng.ContentRange) != fmt.Sprintf("bytes 100-199/%d", len(body)) {
		t.Fatalf("ranged GET: %q, %s", b, aws.ToString(rng.ContentRange))
	}
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin"), Range: aws.String("bytes=999999999-")})
	wantCode(t, "range past the end", err, "InvalidRange")
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin"), IfNoneMatch: put.ETag})
	wantCode(t, "If-None-Match of the current ETag", err, "NotModified")
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin"), IfMatch: aws.String(`"0123"`)})
	wantCode(t, "If-Match of another ETag", err, "PreconditionFailed")
	head, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin")})
	if err != nil || aws.ToInt64(head.ContentLength) != int64(len(body)) || aws.ToString(head.ETag) != md5hex(body) {
		t.Fatalf("HEAD: %+v %v", head, err)
	}

	// The object is a braid file with the same bytes.
	f, err := e.cl.Open(ctx, "/data/dir/sub/obj.bin")
	if err != nil {
		t.Fatal(err)
	}
	fb := make([]byte, len(body))
	if _, err := f.ReadAt(fb, 0); err != nil || !bytes.Equal(fb, body) {
		t.Fatalf("braid read of the object: %v", err)
	}
	f.Close()

	// Errors.
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("data"), Key: aws.String("nope")})
	wantCode(t, "missing key", err, "NoSuchKey")
	_, err = e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("nobucket"), Key: aws.String("x")})
	wantCode(t, "missing bucket", err, "NoSuchBucket")
	_, err = e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String("a//b"), Body: strings.NewReader("x")})
	wantCode(t, "key with an empty component", err, "InvalidArgument")
	_, err = e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin/under"), Body: strings.NewReader("x")})
	wantCode(t, "key under an object", err, "ObjectParentIsFile")
	_, err = e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub"), Body: strings.NewReader("x")})
	wantCode(t, "key naming a prefix", err, "ExistingObjectIsDirectory")
	_, err = client(e.srv.Addr(), e.key.AccessKey, "wrong"+e.key.SecretKey).ListBuckets(ctx, &s3.ListBucketsInput{})
	wantCode(t, "wrong secret", err, "SignatureDoesNotMatch")
	_, err = client(e.srv.Addr(), "BRNOSUCHKEY0000000", "x").ListBuckets(ctx, &s3.ListBucketsInput{})
	wantCode(t, "unknown access key", err, "InvalidAccessKeyId")
	_, err = e.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("data")})
	wantCode(t, "DeleteBucket of a non-empty bucket", err, "BucketNotEmpty")
	if _, err := e.cl.Stat(ctx, "/data/.braid-s3/tmp"); err != nil {
		t.Fatalf("a refused DeleteBucket removed the PUTs' temporary directory: %v", err)
	}

	// Delete: the object goes, and the prefixes it alone kept.
	if _, err := e.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("data"), Key: aws.String("dir/sub/obj.bin")}); err != nil {
		t.Fatalf("deleting a missing key: %v (S3 answers 204)", err)
	}
	if _, err := e.cl.Stat(ctx, "/data/dir"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("implicit directory left after its last key went: %v", err)
	}
	if _, err := e.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("data")}); err != nil {
		t.Fatalf("DeleteBucket of the emptied bucket: %v", err)
	}
}

// Listings against a model: every key in S3 order, with and without a
// delimiter, with prefixes and in pages.
func TestListObjectsAgainstModel(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("list")}); err != nil {
		t.Fatal(err)
	}
	// Names chosen so that directory order and key order differ ("a/" sorts
	// after "a-b" and "a.c").
	keys := []string{"a", "a-b", "a.c", "a/x", "a/y/z", "a/y-1", "ab", "b/c/d/e", "b/c-d", "c", "c/", "z z"}
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == "a" || k == "c" }) // a and c are directories here
	// What each put answered: a listing tells the same.
	etags := map[string]string{}
	for _, k := range keys {
		body := strings.NewReader(strings.Repeat(k, 3))
		if strings.HasSuffix(k, "/") {
			body = strings.NewReader("")
		}
		out, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("list"), Key: aws.String(k), Body: body})
		if err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		etags[k] = aws.ToString(out.ETag)
	}
	slices.Sort(keys)
	for _, prefix := range []string{"", "a", "a/", "a/y", "b/c", "zz", "c/"} {
		for _, delim := range []string{"", "/", "-"} {
			for _, page := range []int32{1, 2, 1000} {
				wantKeys, wantCPs := model(keys, prefix, delim)
				var gotKeys, gotCPs []string
				var token *string
				for calls := 0; calls < 100; calls++ {
					out, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("list"), Prefix: aws.String(prefix),
						Delimiter: aws.String(delim), MaxKeys: aws.Int32(page), ContinuationToken: token})
					if err != nil {
						t.Fatalf("list %q %q: %v", prefix, delim, err)
					}
					for _, o := range out.Contents {
						gotKeys = append(gotKeys, aws.ToString(o.Key))
						if k := aws.ToString(o.Key); aws.ToString(o.ETag) != etags[k] {
							t.Fatalf("%q listed with ETag %s, put answered %s", k, aws.ToString(o.ETag), etags[k])
						}
					}
					for _, p := range out.CommonPrefixes {
						gotCPs = append(gotCPs, aws.ToString(p.Prefix))
					}
					if !aws.ToBool(out.IsTruncated) {
						break
					}
					token = out.NextContinuationToken
				}
				if !slices.Equal(gotKeys, wantKeys) || !slices.Equal(gotCPs, wantCPs) {
					t.Fatalf("prefix %q delimiter %q page %d:\n keys %q\n want %q\n prefixes %q\n want %q", prefix, delim, page, gotKeys, wantKeys, gotCPs, wantCPs)
				}
			}
		}
	}
}

// model is S3's listing rule over a sorted key list.
func model(keys []string, prefix, delim string) (objs, cps []string) {
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if delim != "" {
			if i := strings.Index(k[len(prefix):], delim); i >= 0 {
				cp := k[:len(prefix)+i+len(delim)]
				if len(cps) == 0 || cps[len(cps)-1] != cp {
					cps = append(cps, cp)
				}
				continue
			}
		}
		objs = append(objs, k)
	}
	return objs, cps
}

// TestAnonymousAccess: anonymous requests are refused unless the bucket
// is public, and a public-read bucket is readable, not writable.
func TestAnonymousAccess(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	for _, b := range []string{"private", "public"} {
		if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String("k"), Body: strings.NewReader("hello " + b)}); err != nil {
			t.Fatal(err)
		}
	}
	anon := func(method, url string, body io.Reader) (int, string) {
		req, err := http.NewRequest(method, "http://"+e.srv.Addr()+url, body)
		if err != nil {
			t.Fatal(err)
		}
		return doHTTP(t, req)
	}
	for _, c := range []struct{ method, url string }{{"GET", "/private/k"}, {"GET", "/private"}, {"GET", "/"}, {"PUT", "/private/new"}, {"DELETE", "/private/k"}, {"GET", "/public/k"}} {
		if code, body := anon(c.method, c.url, strings.NewReader("x")); code != http.StatusForbidden || !strings.Contains(body, "AccessDenied") {
			t.Fatalf("anonymous %s %s: %d %s", c.method, c.url, code, body)
		}
	}
	if _, err := e.s3.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("public"), ACL: types.BucketCannedACLPublicRead}); err != nil {
		t.Fatal(err)
	}
	if code, body := anon("GET", "/public/k", nil); code != http.StatusOK || body != "hello public" {
		t.Fatalf("anonymous GET of a public-read object: %d %q", code, body)
	}
	if code, body := anon("GET", "/public?list-type=2", nil); code != http.StatusOK || !strings.Contains(body, "<Key>k</Key>") {
		t.Fatalf("anonymous listing of a public-read bucket: %d %q", code, body)
	}
	for _, c := range []struct{ method, url string }{{"PUT", "/public/new"}, {"DELETE", "/public/k"}, {"GET", "/private/k"}} {
		if code, body := anon(c.method, c.url, strings.NewReader("x")); code != http.StatusForbidden {
			t.Fatalf("anonymous %s %s with public-read: %d %s", c.method, c.url, code, body)
		}
	}
	if _, err := e.cl.Stat(ctx, "/public/k"); err != nil {
		t.Fatalf("the object after refused anonymous writes: %v", err)
	}
	if _, err := e.s3.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("public"), ACL: types.BucketCannedACLPrivate}); err != nil {
		t.Fatal(err)
	}
	if code, _ := anon("GET", "/public/k", nil); code != http.StatusForbidden {
		t.Fatalf("anonymous GET once private again: %d", code)
	}
}

// TestListingStaysInBucket: a prefix or marker naming "..", "." or the
// gateway's reserved directory lists nothing outside the bucket's keys.
func TestListingStaysInBucket(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	for _, b := range []string{"mine", "theirs"} {
		if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"theirs/secret", "mine/d/x"} {
		b, key, _ := strings.Cut(k, "/")
		if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(b), Key: aws.String(key), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(prefix, after string) []string {
		in := &s3.ListObjectsV2Input{Bucket: aws.String("mine"), Prefix: aws.String(prefix)}
		if after != "" {
			in.StartAfter = aws.String(after)
		}
		out, err := e.s3.ListObjectsV2(ctx, in)
		if err != nil {
			t.Fatalf("list prefix %q after %q: %v", prefix, after, err)
		}
		var keys []string
		for _, o := range out.Contents {
			keys = append(keys, *o.Key)
		}
		for _, p := range out.CommonPrefixes {
			keys = append(keys, *p.Prefix)
		}
		return keys
	}
	for _, prefix := range []string{"../", "../theirs/", "./", "d/../", "d/./", ".braid-s3/", "/"} {
		if got := list(prefix, ""); len(got) != 0 {
			t.Errorf("prefix %q listed %q", prefix, got)
		}
	}
	for _, after := range []string{"../", "../a", "./", "./a", "..a", ".a"} {
		if got := list("", after); !slices.Equal(got, []string{"d/x"}) {
			t.Errorf("start-after %q listed %q, want [d/x]", after, got)
		}
	}
}
