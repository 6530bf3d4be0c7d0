package s3gw_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

const mib = 1 << 20

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// multipartETag is S3's: the MD5 of the parts' MD5s, "-" and the count.
func multipartETag(parts ...[]byte) string {
	var sums []byte
	for _, p := range parts {
		s := md5.Sum(p)
		sums = append(sums, s[:]...)
	}
	s := md5.Sum(sums)
	return fmt.Sprintf(`"%s-%d"`, hex.EncodeToString(s[:]), len(parts))
}

func (e *env) getBytes(t *testing.T, bucket, key string) ([]byte, *s3.GetObjectOutput) {
	t.Helper()
	out, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("GET %s/%s: %v", bucket, key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("GET %s/%s body: %v", bucket, key, err)
	}
	return b, out
}

func (e *env) uploadPart(t *testing.T, bucket, key, id string, n int32, body []byte) string {
	t.Helper()
	out, err := e.s3.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: &id,
		PartNumber: aws.Int32(n), Body: bytes.NewReader(body)})
	if err != nil {
		t.Fatalf("UploadPart %d: %v", n, err)
	}
	if aws.ToString(out.ETag) != md5hex(body) {
		t.Fatalf("part %d ETag %s, want %s", n, aws.ToString(out.ETag), md5hex(body))
	}
	return aws.ToString(out.ETag)
}

func completed(parts ...any) *types.CompletedMultipartUpload {
	var out types.CompletedMultipartUpload
	for i := 0; i < len(parts); i += 2 {
		out.Parts = append(out.Parts, types.CompletedPart{PartNumber: aws.Int32(int32(parts[i].(int))), ETag: aws.String(parts[i+1].(string))})
	}
	return &out
}

func TestMultipartUpload(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	bucket, key := "mpu", "big/object.bin"
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	cr, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key,
		ContentType: aws.String("application/x-big"), Metadata: map[string]string{"origin": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(cr.UploadId)
	p1, p2, p3 := randBytes(1, 5*mib), randBytes(2, 5*mib), randBytes(3, 1000)
	e1 := e.uploadPart(t, bucket, key, id, 1, p1)
	old2 := e.uploadPart(t, bucket, key, id, 2, randBytes(9, 5*mib))
	e2 := e.uploadPart(t, bucket, key, id, 2, p2) // replaces the first part 2
	e3 := e.uploadPart(t, bucket, key, id, 3, p3)

	_, err = e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	wantCode(t, "HEAD before completion", err, "NotFound")
	lp, err := e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: &bucket, Key: &key, UploadId: &id, MaxParts: aws.Int32(2)})
	if err != nil || len(lp.Parts) != 2 || !aws.ToBool(lp.IsTruncated) || aws.ToString(lp.NextPartNumberMarker) != "2" ||
		aws.ToString(lp.Parts[1].ETag) != e2 || aws.ToInt64(lp.Parts[1].Size) != 5*mib {
		t.Fatalf("ListParts page 1: %+v %v", lp, err)
	}
	lp, err = e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: &bucket, Key: &key, UploadId: &id, PartNumberMarker: lp.NextPartNumberMarker})
	if err != nil || len(lp.Parts) != 1 || aws.ToInt32(lp.Parts[0].PartNumber) != 3 || aws.ToBool(lp.IsTruncated) {
		t.Fatalf("ListParts page 2: %+v %v", lp, err)
	}
	lu, err := e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket})
	if err != nil || len(lu.Uploads) != 1 || aws.ToString(lu.Uploads[0].UploadId) != id || aws.ToString(lu.Uploads[0].Key) != key {
		t.Fatalf("ListMultipartUploads: %+v %v", lu, err)
	}

	complete := func(parts *types.CompletedMultipartUpload) (*s3.CompleteMultipartUploadOutput, error) {
		return e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: &id, MultipartUpload: parts})
	}
	_, err = complete(completed(1, e1, 2, old2, 3, e3))
	wantCode(t, "completion naming a replaced part", err, "InvalidPart")
	_, err = complete(completed(2, e2, 1, e1))
	wantCode(t, "completion out of order", err, "InvalidPartOrder")
	_, err = complete(completed(1, e1, 2, e2, 4, e3))
	wantCode(t, "completion naming a missing part", err, "InvalidPart")
	_, err = complete(completed(2, e2, 4, e3))
	wantCode(t, "completion naming a missing part", err, "InvalidPart")
	_, err = e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: aws.String("other"), UploadId: &id,
		MultipartUpload: completed(1, e1)})
	wantCode(t, "completion under another key", err, "NoSuchUpload")
	_, err = e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: aws.String("../../x"),
		MultipartUpload: completed(1, e1)})
	wantCode(t, "completion of an ID that is a path", err, "NoSuchUpload")

	out, err := complete(completed(1, e1, 2, e2, 3, e3))
	if err != nil {
		t.Fatal(err)
	}
	wantETag := multipartETag(p1, p2, p3)
	if aws.ToString(out.ETag) != wantETag {
		t.Fatalf("completion ETag %s, want %s", aws.ToString(out.ETag), wantETag)
	}
	got, gout := e.getBytes(t, bucket, key)
	whole := bytes.Join([][]byte{p1, p2, p3}, nil)
	if !bytes.Equal(got, whole) || aws.ToString(gout.ETag) != wantETag || aws.ToString(gout.ContentType) != "application/x-big" || gout.Metadata["origin"] != "test" {
		t.Fatalf("GET after completion: %d bytes (equal %v), ETag %s, type %s, meta %v", len(got), bytes.Equal(got, whole),
			aws.ToString(gout.ETag), aws.ToString(gout.ContentType), gout.Metadata)
	}
	if out, err := complete(completed(1, e1, 2, e2, 3, e3)); err != nil || aws.ToString(out.ETag) != wantETag {
		t.Fatalf("a retried completion: %v %v", out, err)
	}
	_, err = e.s3.UploadPart(ctx, &s3.UploadPartInput{Bucket: &bucket, Key: &key, UploadId: &id, PartNumber: aws.Int32(4), Body: bytes.NewReader(p3)})
	wantCode(t, "UploadPart after completion", err, "NoSuchUpload")
	if lu, err := e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket}); err != nil || len(lu.Uploads) != 0 {
		t.Fatalf("uploads after completion: %+v %v", lu, err)
	}

	// A small part anywhere but last is refused; abort removes the upload.
	cr, err = e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	id = aws.ToString(cr.UploadId)
	s1 := e.uploadPart(t, bucket, key, id, 1, p3)
	s2 := e.uploadPart(t, bucket, key, id, 2, p3)
	_, err = complete(completed(1, s1, 2, s2))
	wantCode(t, "a small first part", err, "EntityTooSmall")
	if _, err := e.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: &id}); err != nil {
		t.Fatal(err)
	}
	_, err = e.s3.ListParts(ctx, &s3.ListPartsInput{Bucket: &bucket, Key: &key, UploadId: &id})
	wantCode(t, "ListParts after abort", err, "NoSuchUpload")
	_, err = e.s3.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: &id})
	wantCode(t, "second abort", err, "NoSuchUpload")
	if got, _ := e.getBytes(t, bucket, key); !bytes.Equal(got, whole) {
		t.Fatal("an aborted upload changed the object")
	}
	ents, err := e.cl.ReadDir(ctx, "/mpu/.braid-s3/uploads")
	if err != nil || len(ents) != 0 {
		t.Fatalf("uploads directory after abort: %v %v", ents, err)
	}

	// A completion still copying (its claim, as another gateway's): a
	// retry gets the retryable SlowDown, not NoSuchUpload, and the upload
	// is not listed.
	cr, err = e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	id = aws.ToString(cr.UploadId)
	s1 = e.uploadPart(t, bucket, key, id, 1, p3)
	dir := "/mpu/.braid-s3/uploads/" + id
	if err := e.cl.Rename(ctx, dir, dir+".completing.0a0b0c0d"); err != nil {
		t.Fatal(err)
	}
	_, err = complete(completed(1, s1))
	wantCode(t, "completion while another completes", err, "SlowDown")
	if lu, err := e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket}); err != nil || len(lu.Uploads) != 0 {
		t.Fatalf("a claimed upload is listed: %+v %v", lu, err)
	}
}

func TestCopyAndDeleteObjects(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	bucket := "cpy"
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	src := randBytes(4, 6*mib+123)
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("src"), Body: bytes.NewReader(src),
		ContentType: aws.String("text/x-src"), Metadata: map[string]string{"k": "v"}}); err != nil {
		t.Fatal(err)
	}
	co, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("a/copy"), CopySource: aws.String("cpy/src")})
	if err != nil || aws.ToString(co.CopyObjectResult.ETag) != md5hex(src) {
		t.Fatalf("CopyObject: %+v %v", co, err)
	}
	got, out := e.getBytes(t, bucket, "a/copy")
	if !bytes.Equal(got, src) || aws.ToString(out.ContentType) != "text/x-src" || out.Metadata["k"] != "v" {
		t.Fatalf("copy: equal %v, type %s, meta %v", bytes.Equal(got, src), aws.ToString(out.ContentType), out.Metadata)
	}
	_, err = e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("a/copy"), CopySource: aws.String("cpy/src"),
		CopySourceIfMatch: aws.String(`"nope"`)})
	wantCode(t, "copy with a failed source condition", err, "PreconditionFailed")
	_, err = e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("x"), CopySource: aws.String("cpy/missing")})
	wantCode(t, "copy of a missing key", err, "NoSuchKey")
	_, err = e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("src"), CopySource: aws.String("cpy/src")})
	wantCode(t, "copy onto itself without new metadata", err, "InvalidRequest")
	if _, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: &bucket, Key: aws.String("src"), CopySource: aws.String("cpy/src"),
		MetadataDirective: types.MetadataDirectiveReplace, ContentType: aws.String("text/x-new"), Metadata: map[string]string{"k": "new"}}); err != nil {
		t.Fatal(err)
	}
	ho, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("src")})
	if err != nil || aws.ToString(ho.ContentType) != "text/x-new" || ho.Metadata["k"] != "new" || aws.ToString(ho.ETag) != md5hex(src) {
		t.Fatalf("HEAD after replacing metadata: %+v %v", ho, err)
	}

	// UploadPartCopy: a range of one object and the whole of another.
	key := "assembled"
	cr, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	small := []byte("the tail part")
	if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("small"), Body: bytes.NewReader(small)}); err != nil {
		t.Fatal(err)
	}
	pc1, err := e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &bucket, Key: &key, UploadId: cr.UploadId, PartNumber: aws.Int32(1),
		CopySource: aws.String("cpy/src"), CopySourceRange: aws.String(fmt.Sprintf("bytes=100-%d", 100+5*mib-1))})
	if err != nil || aws.ToString(pc1.CopyPartResult.ETag) != md5hex(src[100:100+5*mib]) {
		t.Fatalf("UploadPartCopy range: %+v %v", pc1, err)
	}
	pc2, err := e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &bucket, Key: &key, UploadId: cr.UploadId, PartNumber: aws.Int32(2),
		CopySource: aws.String("cpy/small")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.s3.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: &bucket, Key: &key, UploadId: cr.UploadId, PartNumber: aws.Int32(3),
		CopySource: aws.String("cpy/small"), CopySourceRange: aws.String("bytes=5-100")})
	wantCode(t, "UploadPartCopy range past the end", err, "InvalidArgument")
	if _, err := e.s3.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: &bucket, Key: &key, UploadId: cr.UploadId,
		MultipartUpload: completed(1, aws.ToString(pc1.CopyPartResult.ETag), 2, aws.ToString(pc2.CopyPartResult.ETag))}); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, src[100:100+5*mib]...), small...)
	if got, _ := e.getBytes(t, bucket, key); !bytes.Equal(got, want) {
		t.Fatalf("assembled object: %d bytes, want %d", len(got), len(want))
	}

	// DeleteObjects: present, absent and unstorable keys, each reported.
	do, err := e.s3.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("src")}, {Key: aws.String("a/copy")}, {Key: aws.String("never-was")}, {Key: aws.String("a//b")}}}})
	if err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	for _, d := range do.Deleted {
		deleted[aws.ToString(d.Key)] = true
	}
	if len(do.Deleted) != 3 || !deleted["src"] || !deleted["a/copy"] || !deleted["never-was"] ||
		len(do.Errors) != 1 || aws.ToString(do.Errors[0].Key) != "a//b" || aws.ToString(do.Errors[0].Code) != "InvalidArgument" {
		t.Fatalf("DeleteObjects: deleted %v, errors %+v", deleted, do.Errors)
	}
	lo, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &bucket})
	if err != nil || len(lo.Contents) != 2 {
		t.Fatalf("keys left: %+v %v", lo, err)
	}
}

func TestListMultipartUploads(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	bucket := "lmu"
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	ids := map[string][]string{}
	for _, k := range []string{"b", "a/2", "a/1", "b", "c/x/y", "d"} {
		cr, err := e.s3.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String(k)})
		if err != nil {
			t.Fatal(err)
		}
		ids[k] = append(ids[k], aws.ToString(cr.UploadId))
	}
	// All, paged two at a time: key order, then initiation order.
	var seen []string
	in := &s3.ListMultipartUploadsInput{Bucket: &bucket, MaxUploads: aws.Int32(2)}
	for page := 0; page < 10; page++ {
		out, err := e.s3.ListMultipartUploads(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range out.Uploads {
			seen = append(seen, aws.ToString(u.Key)+"#"+aws.ToString(u.UploadId))
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
	var want []string
	for _, k := range []string{"a/1", "a/2", "b", "b", "c/x/y", "d"} {
		want = append(want, k+"#"+ids[k][0])
		ids[k] = ids[k][1:]
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("uploads\n got %v\nwant %v", seen, want)
	}
	out, err := e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket, Delimiter: aws.String("/")})
	if err != nil || len(out.CommonPrefixes) != 2 || aws.ToString(out.CommonPrefixes[0].Prefix) != "a/" ||
		aws.ToString(out.CommonPrefixes[1].Prefix) != "c/" || len(out.Uploads) != 3 {
		t.Fatalf("with delimiter: %+v %v", out, err)
	}
	out, err = e.s3.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket, Prefix: aws.String("c/"), Delimiter: aws.String("/")})
	if err != nil || len(out.CommonPrefixes) != 1 || aws.ToString(out.CommonPrefixes[0].Prefix) != "c/x/" || len(out.Uploads) != 0 {
		t.Fatalf("prefix c/: %+v %v", out, err)
	}
	_, err = e.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket})
	wantCode(t, "DeleteBucket with uploads in progress", err, "BucketNotEmpty")
}
