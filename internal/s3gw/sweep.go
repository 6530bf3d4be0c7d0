package s3gw

import (
	"context"
	"errors"
	"time"

	"github.com/braidfs/braid"
)

// A gateway that crashes mid-request leaves its work in the bucket's
// reserved directory: a temporary file of a PUT or part, an upload claimed
// for completion (ID.completing) or for abort (ID.aborting). None is
// visible as an object. Each gateway sweeps them once they are older than
// staleAfter: far longer than any request (S3 caps a PUT and a part at
// 5 GiB) and any clock skew between gateways sharing a namespace.
const (
	staleAfter  = 24 * time.Hour
	sweepEvery  = time.Hour
	maxSweepDir = 100 // pages of listPage entries read per directory per sweep
)

// sweepStats counts what one sweep did.
type sweepStats struct {
	Removed  int // temporaries and aborted uploads
	Restored int // claimed completions handed back to their upload
	Failed   int // buckets whose sweep stopped at an error
}

// sweep cleans every bucket's abandoned work older than staleAfter at now.
func (b *braidBackend) sweep(ctx context.Context, now time.Time) (sweepStats, error) {
	var st sweepStats
	buckets, err := b.readDirAll(ctx, "/")
	if err != nil {
		return st, err
	}
	for _, e := range buckets {
		if e.Inode.Type != braid.TypeDir || !validBucketName(e.Name) {
			continue
		}
		if err := b.sweepBucket(ctx, e.Name, now, &st); err != nil && !errors.Is(err, braid.ErrNotFound) {
			st.Failed++ // the next sweep tries again; other buckets go on
		}
	}
	return st, nil
}

func (b *braidBackend) sweepBucket(ctx context.Context, bucket string, now time.Time, st *sweepStats) error {
	old := func(e braid.DirEntry) bool {
		return now.Sub(time.Unix(0, e.Inode.MtimeNs)) > staleAfter && now.Sub(time.Unix(0, e.Inode.CtimeNs)) > staleAfter
	}
	base := "/" + bucket + "/" + reservedDir
	tmps, err := b.readDirAll(ctx, base+"/tmp")
	if err != nil && !errors.Is(err, braid.ErrNotFound) {
		return err
	}
	for _, e := range tmps {
		if old(e) && b.cl.Remove(ctx, base+"/tmp/"+e.Name) == nil {
			st.Removed++
		}
	}
	ups, err := b.readDirAll(ctx, uploadsDir(bucket))
	if err != nil {
		return err
	}
	for _, e := range ups {
		if !old(e) {
			continue
		}
		dir := uploadsDir(bucket) + "/" + e.Name
		switch id, kind := claimOf(e.Name); kind {
		case abortingSuffix:
			if b.removeTree(ctx, dir) == nil {
				st.Removed++
			}
		case completingSuffix:
			if b.finishedCompletion(ctx, bucket, dir, id) {
				if b.removeTree(ctx, dir) == nil {
					st.Removed++
				}
			} else if b.cl.Rename(ctx, dir, uploadsDir(bucket)+"/"+id) == nil {
				// The completion died before its rename over the key:
				// the upload is the client's again.
				st.Restored++
			}
		default:
			if _, err := b.readUpload(ctx, dir); errors.Is(err, braid.ErrNoData) && validUploadID(id) {
				// A CreateMultipartUpload that died before recording its key.
				if b.removeTree(ctx, dir) == nil {
					st.Removed++
				}
			}
		}
	}
	return nil
}

// finishedCompletion reports whether the completion that claimed dir got
// as far as renaming its object over the key (and died removing parts).
func (b *braidBackend) finishedCompletion(ctx context.Context, bucket, dir, id string) bool {
	u, err := b.readUpload(ctx, dir)
	if err != nil {
		return false
	}
	p, _, err := objectPath(bucket, u.Key)
	if err != nil {
		return false
	}
	oi, err := b.stat(ctx, p)
	return err == nil && !oi.dir && oi.meta.UploadID == id
}

// readDirAll lists a directory, up to maxSweepDir pages (the sweep
// changes the directory as it goes, so it reads first).
func (b *braidBackend) readDirAll(ctx context.Context, dir string) ([]braid.DirEntry, error) {
	fi, err := b.cl.Stat(ctx, dir)
	if err != nil {
		return nil, err
	}
	var all []braid.DirEntry
	err = b.eachEntry(ctx, fi.Ino, "", maxSweepDir*listPage, func(e braid.DirEntry) bool {
		all = append(all, e)
		return true
	})
	return all, err
}

// eachEntry calls fn for the entries of directory ino named after after,
// in name order, reading pages of listPage, at most maxEntries of them;
// fn returns false to stop.
func (b *braidBackend) eachEntry(ctx context.Context, ino uint64, after string, maxEntries int, fn func(braid.DirEntry) bool) error {
	for seen := 0; seen < maxEntries; {
		ents, more, err := b.cl.ReadDirAt(ctx, ino, after, min(listPage, maxEntries-seen))
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !fn(e) {
				return nil
			}
		}
		seen += len(ents)
		if !more || len(ents) == 0 {
			return nil
		}
		after = ents[len(ents)-1].Name
	}
	return nil
}

// sweepLoop sweeps at start and every sweepEvery until ctx ends.
func (b *braidBackend) sweepLoop(ctx context.Context, now func() time.Time) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		_, _ = b.sweep(ctx, now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
