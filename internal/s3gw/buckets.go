package s3gw

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/braidfs/braid"
)

// Buckets are the top-level directories. A bucket's ACL (versitygw's JSON
// form: owner and grants, e.g. public-read) is the xattr user.s3.acl of
// its directory; a directory made through a mount has none and is a
// bucket of admins only (access.go).
const aclXattr = "user.s3.acl"

const listPage = 1000 // directory entries fetched per MDS call

func (b *braidBackend) ListBuckets(rctx context.Context, in s3response.ListBucketsInput) (s3response.ListAllMyBucketsResult, error) {
	ctx := b.opCtx(rctx)
	out := s3response.ListAllMyBucketsResult{Owner: s3response.CanonicalUser{ID: in.Owner}}
	after := in.ContinuationToken
	for page := 0; page < maxBucketPages; page++ {
		entries, more, err := b.cl.ReadDirAt(ctx, braid.RootIno, after, listPage)
		if err != nil {
			return out, s3Error(err, s3err.ErrInternalError)
		}
		for _, e := range entries {
			after = e.Name
			if e.Inode.Type != braid.TypeDir || !validBucketName(e.Name) || !strings.HasPrefix(e.Name, in.Prefix) {
				continue
			}
			if !in.IsAdmin && !b.owns(ctx, in.Owner, e.Name) {
				continue
			}
			out.Buckets.Bucket = append(out.Buckets.Bucket, s3response.ListAllMyBucketsEntry{
				Name: e.Name, CreationDate: timeOf(e.Inode.CtimeNs)})
			if in.MaxBuckets > 0 && len(out.Buckets.Bucket) >= int(in.MaxBuckets) {
				out.ContinuationToken = e.Name
				return out, nil
			}
		}
		if !more || len(entries) == 0 {
			return out, nil
		}
	}
	return out, nil
}

// owns reports whether the user of access key owner owns bucket.
func (b *braidBackend) owns(ctx context.Context, owner, bucket string) bool {
	acl, err := b.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: &bucket})
	return err == nil && owner != "" && aclOwner(acl) == owner
}

// maxBucketPages bounds one ListBuckets (10M top-level entries).
const maxBucketPages = 10_000

// validBucketName says whether a top-level directory is a bucket: 3-63
// of a-z 0-9 . -, starting and ending with a letter or digit. (Buckets
// made before the gateway held new ones to validNewBucketName stay
// buckets: listed, swept, copied from.)
func validBucketName(n string) bool {
	if len(n) < 3 || len(n) > 63 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '.' && c != '-' || i == 0 || i == len(n)-1) {
			return false
		}
	}
	return true
}

// validNewBucketName is S3's whole rule for a bucket made now: a valid
// bucket name with no label starting or ending with a hyphen (so neither
// "..", ".-" nor "-."), not an IP address, and none of the prefixes and
// suffixes AWS keeps for itself.
func validNewBucketName(n string) bool {
	if !validBucketName(n) {
		return false
	}
	if strings.Contains(n, "..") || strings.Contains(n, ".-") || strings.Contains(n, "-.") {
		return false
	}
	if ip := net.ParseIP(n); ip != nil {
		return false
	}
	for _, p := range reservedBucketPrefixes {
		if strings.HasPrefix(n, p) {
			return false
		}
	}
	for _, s := range reservedBucketSuffixes {
		if strings.HasSuffix(n, s) {
			return false
		}
	}
	return true
}

// The prefixes and suffixes of bucket names AWS reserves.
var (
	reservedBucketPrefixes = []string{"xn--", "sthree-", "amzn-s3-demo-"}
	reservedBucketSuffixes = []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"}
)

func (b *braidBackend) HeadBucket(rctx context.Context, in *s3.HeadBucketInput) (*s3.HeadBucketOutput, error) {
	ctx := b.opCtx(rctx)
	if _, err := b.bucketDir(ctx, str(in.Bucket)); err != nil {
		return nil, err
	}
	return &s3.HeadBucketOutput{}, nil
}

// GetBucketAcl is versitygw's existence and authorization check before
// every bucket operation.
// Its answers for existing buckets are cached for aclCacheTTL (two MDS
// calls saved on every request): a bucket made private, or removed,
// through another gateway or a mount is seen within that time.
func (b *braidBackend) GetBucketAcl(rctx context.Context, in *s3.GetBucketAclInput) ([]byte, error) {
	ctx := b.opCtx(rctx)
	bucket := str(in.Bucket)
	acl, gen, ok := b.acls.get(bucket, time.Now())
	if ok {
		return acl, nil
	}
	fi, err := b.bucketDir(ctx, bucket)
	if err != nil {
		return nil, err
	}
	r, err := b.cl.Xattr(ctx, braid.XattrRequest{Ino: fi.Ino, Op: "get", Name: aclXattr})
	switch {
	case err == nil:
		acl = r.Value
	case !errors.Is(err, braid.ErrNoData):
		return nil, s3Error(err, s3err.ErrNoSuchBucket)
	}
	b.acls.put(bucket, acl, time.Now(), gen)
	return acl, nil
}

const (
	aclCacheTTL     = time.Second
	maxCachedBucket = 4096
)

// aclCache holds recent bucket ACLs; nil means the bucket has none.
type aclCache struct {
	mu      sync.Mutex
	entries map[string]cachedACL
	gen     uint64 // counts forgets: a read begun before one is not cached
}

type cachedACL struct {
	acl []byte
	at  time.Time
}

// get returns a fresh cached ACL, or the generation a read of the ACL
// begins at.
func (c *aclCache) get(bucket string, now time.Time) ([]byte, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[bucket]
	if !ok || now.Sub(e.at) >= aclCacheTTL || now.Before(e.at) {
		return nil, c.gen, false
	}
	return e.acl, c.gen, true
}

// put caches what a read begun at generation gen found, unless a change
// was made since.
func (c *aclCache) put(bucket string, acl []byte, now time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.entries == nil || len(c.entries) >= maxCachedBucket {
		c.entries = make(map[string]cachedACL) // all entries are young: start over
	}
	// The name may share memory with a request buffer the HTTP server
	// reuses: the key must be a copy.
	c.entries[strings.Clone(bucket)] = cachedACL{acl: acl, at: now}
}

// forget drops a bucket whose ACL or existence this gateway changed.
func (c *aclCache) forget(bucket string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, bucket)
	c.gen++
}

func (b *braidBackend) CreateBucket(rctx context.Context, in *s3.CreateBucketInput, acl []byte) error {
	ctx := b.opCtx(rctx)
	bucket := str(in.Bucket)
	if !validNewBucketName(bucket) {
		return s3err.GetAPIError(s3err.ErrInvalidBucketName)
	}
	id, _ := idOf(ctx)
	uid, gid := id.owner()
	_, err := b.cl.MkdirAt(ctx, braid.RootIno, bucket, bucketMode, uid, gid)
	if errors.Is(err, braid.ErrExists) {
		if held, _ := b.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: &bucket}); aclOwner(held) == id.access && id.access != "" {
			return s3err.GetAPIError(s3err.ErrBucketAlreadyOwnedByYou)
		}
		return s3err.GetAPIError(s3err.ErrBucketAlreadyExists)
	}
	if err != nil {
		return s3Error(err, s3err.ErrNoSuchBucket)
	}
	return b.PutBucketAcl(ctx, bucket, acl)
}

func (b *braidBackend) PutBucketAcl(rctx context.Context, bucket string, acl []byte) error {
	ctx := b.opCtx(rctx)
	defer b.acls.forget(bucket)
	fi, err := b.bucketDir(ctx, bucket)
	if err != nil {
		return err
	}
	if len(acl) == 0 {
		return nil
	}
	_, err = b.cl.Xattr(ctx, braid.XattrRequest{Ino: fi.Ino, Op: "set", Name: aclXattr, Value: acl})
	return s3Error(err, s3err.ErrNoSuchBucket)
}

// DeleteBucket removes an empty bucket: one holding no keys, only, at
// most, the gateway's reserved directory (temporary files of PUTs
// abandoned by a crashed gateway; uploads in progress keep it non-empty).
func (b *braidBackend) DeleteBucket(rctx context.Context, bucket string) error {
	ctx := b.opCtx(rctx)
	defer b.acls.forget(bucket)
	// versitygw lets a WRITE grant delete the bucket; only its owner (or
	// an admin) may, or a grantee could empty it and take its name.
	if id, _ := idOf(ctx); !id.admin && !b.owns(ctx, id.access, bucket) {
		if _, err := b.bucketDir(ctx, bucket); err != nil {
			return err
		}
		return s3err.GetAPIError(s3err.ErrAccessDenied)
	}
	fi, err := b.bucketDir(ctx, bucket)
	if err != nil {
		return err
	}
	ents, _, err := b.cl.ReadDirAt(ctx, fi.Ino, "", 2)
	if err != nil {
		return s3Error(err, s3err.ErrNoSuchBucket)
	}
	for _, e := range ents {
		if e.Name != reservedDir {
			return s3err.GetBucketErr(s3err.ErrBucketNotEmpty, bucket)
		}
	}
	if len(ents) > 0 { // the reserved directory alone
		if err := b.removeReserved(ctx, bucket); err != nil {
			return err
		}
	}
	err = b.cl.Remove(ctx, "/"+bucket)
	if errors.Is(err, braid.ErrNotEmpty) {
		return s3err.GetBucketErr(s3err.ErrBucketNotEmpty, bucket)
	}
	return s3Error(err, s3err.ErrNoSuchBucket)
}

// removeReserved empties the reserved directory of leftover temporaries
// and the parts of aborted or completed uploads; a multipart upload in
// progress (or being completed) makes the bucket not empty.
func (b *braidBackend) removeReserved(ctx context.Context, bucket string) error {
	base := "/" + bucket + "/" + reservedDir
	ups, _ := b.readDirAll(ctx, uploadsDir(bucket))
	for _, e := range ups {
		if _, kind := claimOf(e.Name); kind != abortingSuffix {
			return s3err.GetBucketErr(s3err.ErrBucketNotEmpty, bucket)
		}
	}
	for _, e := range ups {
		if err := b.removeTree(ctx, uploadsDir(bucket)+"/"+e.Name); err != nil && !errors.Is(err, braid.ErrNotFound) {
			return s3Error(err, s3err.ErrInternalError)
		}
	}
	tmp, _ := b.cl.ReadDir(ctx, base+"/tmp")
	for _, e := range tmp {
		_ = b.cl.Remove(ctx, base+"/tmp/"+e.Name)
	}
	for _, d := range []string{base + "/tmp", base + "/uploads", base} {
		if err := b.cl.Remove(ctx, d); err != nil && !errors.Is(err, braid.ErrNotFound) {
			return s3Error(err, s3err.ErrInternalError)
		}
	}
	return nil
}

// Policies are not stored: access is by ACL (public-read buckets).
func (b *braidBackend) GetBucketPolicy(context.Context, string) ([]byte, error) {
	return nil, s3err.GetAPIError(s3err.ErrNoSuchBucketPolicy)
}

// No object lock: versitygw asks before every write and delete.
func (b *braidBackend) GetObjectLockConfiguration(context.Context, string) ([]byte, error) {
	return nil, s3err.GetAPIError(s3err.ErrObjectLockConfigurationNotFound)
}

// No ownership controls are stored: ACLs stay enabled, so a bucket can be
// made public-read.
func (b *braidBackend) GetBucketOwnershipControls(context.Context, string) (types.ObjectOwnership, error) {
	return "", s3err.GetAPIError(s3err.ErrOwnershipControlsNotFound)
}
