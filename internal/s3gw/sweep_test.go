package s3gw

import (
	"context"
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
	cl, err := braid.Dial(ctx, c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b := newBackend(cl)
	if err := cl.Mkdir(ctx, "/bkt", false); err != nil {
		t.Fatal(err)
	}
	// A PUT's temporary, a completion and an abort that died midway, and
	// an upload in progress.
	tmp, err := b.tempPath(ctx, "bkt")
	if err != nil {
		t.Fatal(err)
	}
	f, err := cl.Create(ctx, tmp, braid.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		out, err := b.CreateMultipartUpload(ctx, s3response.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, out.UploadId)
	}
	ups := uploadsDir("bkt") + "/"
	if err := cl.Rename(ctx, ups+ids[0], ups+ids[0]+completingSuffix); err != nil {
		t.Fatal(err)
	}
	if err := cl.Rename(ctx, ups+ids[1], ups+ids[1]+abortingSuffix); err != nil {
		t.Fatal(err)
	}

	st, err := b.sweep(ctx, time.Now())
	if err != nil || st != (sweepStats{}) {
		t.Fatalf("sweep of fresh work: %+v %v", st, err)
	}
	st, err = b.sweep(ctx, time.Now().Add(staleAfter+time.Hour))
	if err != nil || st != (sweepStats{Removed: 2, Restored: 1}) {
		t.Fatalf("sweep of stale work: %+v %v", st, err)
	}
	if _, err := cl.Stat(ctx, tmp); err == nil {
		t.Fatal("the stale temporary is still there")
	}
	if _, _, err := b.upload(ctx, "bkt", "k", ids[0]); err != nil {
		t.Fatalf("the dead completion's upload is not the client's again: %v", err)
	}
	if _, err := cl.Stat(ctx, ups+ids[1]+abortingSuffix); err == nil {
		t.Fatal("the dead abort's upload is still there")
	}
	if _, _, err := b.upload(ctx, "bkt", "k", ids[2]); err != nil {
		t.Fatalf("an upload in progress was swept: %v", err)
	}
}
