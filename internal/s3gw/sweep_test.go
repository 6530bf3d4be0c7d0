package s3gw

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/versity/versitygw/s3response"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// TestSweepAbandonedWork: what a crashed gateway leaves is cleaned once
// older than staleAfter, and nothing younger is touched.
func TestSweepAbandonedWork(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	b := newBackend(cl, nil)
	if err := cl.Mkdir(ctx, "/bkt", false); err != nil {
		t.Fatal(err)
	}
	// A PUT's temporary, a completion and an abort that died midway, and
	// an upload in progress.
	if _, err := b.reservedSubdir(ctx, "bkt", "tmp"); err != nil {
		t.Fatal(err)
	}
	tmp := tempPath("bkt")
	f, err := cl.Create(ctx, tmp, braid.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 4; i++ {
		out, err := b.CreateMultipartUpload(ctx, s3response.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, out.UploadId)
	}
	ups := uploadsDir("bkt") + "/"
	completing, aborting := claimName(ups+ids[0], completingSuffix), claimName(ups+ids[1], abortingSuffix)
	if err := cl.Rename(ctx, ups+ids[0], completing); err != nil {
		t.Fatal(err)
	}
	if err := cl.Rename(ctx, ups+ids[1], aborting); err != nil {
		t.Fatal(err)
	}
	// A completion that renamed its object over the key and died removing
	// the parts: its upload must not come back.
	finished := claimName(ups+ids[3], completingSuffix)
	if err := cl.Rename(ctx, ups+ids[3], finished); err != nil {
		t.Fatal(err)
	}
	obj, err := b.stage(ctx, "bkt", strings.NewReader("done"), 4, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.commitObject(ctx, obj, "/bkt/k", &objectMeta{ETag: obj.etag, UploadID: ids[3]}, 0); err != nil {
		t.Fatal(err)
	}
	// A CreateMultipartUpload that died before recording its key.
	bare := ups + newUploadID(time.Now())
	if err := cl.Mkdir(ctx, bare, false); err != nil {
		t.Fatal(err)
	}

	st, err := b.sweep(ctx, time.Now())
	if err != nil || st != (sweepStats{}) {
		t.Fatalf("sweep of fresh work: %+v %v", st, err)
	}
	st, err = b.sweep(ctx, time.Now().Add(staleAfter+time.Hour))
	if err != nil || st != (sweepStats{Removed: 4, Restored: 1}) {
		t.Fatalf("sweep of stale work: %+v %v", st, err)
	}
	for _, gone := range []string{finished, bare, ups + ids[3]} {
		if _, err := cl.Stat(ctx, gone); err == nil {
			t.Fatalf("%s is still there after the sweep", gone)
		}
	}
	if _, err := cl.Stat(ctx, tmp); err == nil {
		t.Fatal("the stale temporary is still there")
	}
	if _, _, err := b.upload(ctx, "bkt", "k", ids[0]); err != nil {
		t.Fatalf("the dead completion's upload is not the client's again: %v", err)
	}
	if _, err := cl.Stat(ctx, aborting); err == nil {
		t.Fatal("the dead abort's upload is still there")
	}
	if _, _, err := b.upload(ctx, "bkt", "k", ids[2]); err != nil {
		t.Fatalf("an upload in progress was swept: %v", err)
	}

	// DeleteBucket: uploads in progress (or being completed) keep the
	// bucket; the parts of an abort cut short do not. (The bucket, made
	// with mkdir, is an admin's.)
	asAdmin := context.WithValue(ctx, identityKey{}, identity{admin: true})
	if err := b.deleteKey(ctx, "bkt", "k"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteBucket(asAdmin, "bkt"); !hasCode(err, "BucketNotEmpty") {
		t.Fatalf("DeleteBucket with uploads in progress: %v", err)
	}
	for _, id := range ids[:3] {
		if _, err := cl.Stat(ctx, ups+id); err == nil {
			if err := cl.Rename(ctx, ups+id, claimName(ups+id, abortingSuffix)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.DeleteBucket(asAdmin, "bkt"); err != nil {
		t.Fatalf("DeleteBucket with only aborted uploads' parts left: %v", err)
	}
}
