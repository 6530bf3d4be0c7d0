package s3gw

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
)

// braidBackend implements versitygw's backend over the client library.
// Operations it does not implement answer NotImplemented (501).
type braidBackend struct {
	backend.BackendUnsupported
	cl    *braid.Client
	acls  aclCache
	users func(access string) (braid.S3User, bool) // the IAM's recent users
}

func newBackend(cl *braid.Client, users func(string) (braid.S3User, bool)) *braidBackend {
	return &braidBackend{cl: cl, users: users}
}

func (b *braidBackend) String() string { return "braid" }

// opCtx is the context of one request's MDS and OSD calls, knowing who
// the request acts as (access.go). versitygw's request contexts are
// pooled and reused once the handler returns (a GET's body is read
// after), so only the identity is taken from req. It has no deadline: a
// PUT of many GiB takes as long as it takes; every call the client
// library makes is bounded by its own I/O timeout.
func (b *braidBackend) opCtx(req context.Context) context.Context {
	return context.WithValue(context.Background(), identityKey{}, b.who(req))
}

type identityKey struct{}

// idOf is who the request of ctx acts as; false for the gateway's own
// work (the sweep), which no one asked for.
func idOf(ctx context.Context) (identity, bool) {
	id, ok := ctx.Value(identityKey{}).(identity)
	return id, ok
}

// Object metadata, kept in one xattr of the file (see doc.go).
const metaXattr = "user.s3"

type objectMeta struct {
	ETag        string            `json:"etag"`
	Size        int64             `json:"size"`
	MtimeNs     int64             `json:"mtime_ns"`
	ContentType string            `json:"content_type,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
	UploadID    string            `json:"upload_id,omitempty"` // the multipart upload that made it
}

const maxMetaBytes = 2 << 10 // S3's limit on user metadata

// layoutMetaKey is the user metadata (x-amz-meta-braid-layout) that picks
// a new object's layout.
const layoutMetaKey = "braid-layout"

const emptyMD5 = "d41d8cd98f00b204e9800998ecf8427e"

// objectInfo is what HEAD, GET and listings say about a file.
type objectInfo struct {
	ino      uint64
	size     int64
	mtime    time.Time
	dir      bool
	meta     objectMeta
	mode     fs.FileMode // type and permission bits
	uid, gid uint32
}

// stat finds the object at p with its metadata and current ETag.
func (b *braidBackend) stat(ctx context.Context, p string) (objectInfo, error) {
	fi, err := b.cl.Stat(ctx, p)
	if err != nil {
		return objectInfo{}, err
	}
	if fi.IsDir {
		return objectInfo{ino: fi.Ino, mtime: fi.ModTime, dir: true, meta: objectMeta{ETag: quote(emptyMD5)},
			mode: fi.Mode, uid: fi.Uid, gid: fi.Gid}, nil
	}
	oi, err := b.fileInfo(ctx, fi.Ino, fi.Size, fi.ModTime.UnixNano())
	oi.mode, oi.uid, oi.gid = fi.Mode, fi.Uid, fi.Gid
	return oi, err
}

// fileInfo reads a file's S3 metadata and settles its ETag.
func (b *braidBackend) fileInfo(ctx context.Context, ino uint64, size, mtimeNs int64) (objectInfo, error) {
	r, err := b.cl.Xattr(ctx, braid.XattrRequest{Ino: ino, Op: "get", Name: metaXattr})
	if err != nil && !errors.Is(err, braid.ErrNoData) {
		return objectInfo{}, err
	}
	return settledInfo(ino, size, mtimeNs, r.Value), nil
}

// settledInfo is a file's objectInfo from its metadata attribute's value
// (nil if it has none), with its ETag settled.
func settledInfo(ino uint64, size, mtimeNs int64, meta []byte) objectInfo {
	oi := objectInfo{ino: ino, size: size, mtime: timeOf(mtimeNs)}
	if meta != nil {
		_ = json.Unmarshal(meta, &oi.meta) // unreadable metadata: the derived ETag below
	}
	if oi.meta.Size != size || oi.meta.MtimeNs != mtimeNs || oi.meta.ETag == "" {
		// Written through a mount or NFS since (or never through S3).
		oi.meta.ETag = derivedETag(ino, size, mtimeNs)
	}
	return oi
}

// derivedETag names a version of a file that S3 did not write: it changes
// when the file does, and its "-0" suffix tells clients it is no MD5.
func derivedETag(ino uint64, size, mtimeNs int64) string {
	var b [24]byte
	binary.BigEndian.PutUint64(b[0:], ino)
	binary.BigEndian.PutUint64(b[8:], uint64(size))
	binary.BigEndian.PutUint64(b[16:], uint64(mtimeNs))
	sum := sha256.Sum256(b[:])
	return quote(hex.EncodeToString(sum[:16]) + "-0")
}

func quote(s string) string { return `"` + s + `"` }

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// bucketDir finds a bucket's directory.
func (b *braidBackend) bucketDir(ctx context.Context, bucket string) (braid.FileInfo, error) {
	fi, err := b.cl.Stat(ctx, "/"+bucket)
	switch {
	case err == nil && fi.IsDir:
		return fi, nil
	case err == nil || errors.Is(err, braid.ErrNotFound):
		return fi, s3err.GetAPIError(s3err.ErrNoSuchBucket)
	}
	return fi, s3Error(err, s3err.ErrNoSuchBucket)
}

// PutObject streams the body into a hidden file and renames it over the
// key once it is whole and durable.
func (b *braidBackend) PutObject(rctx context.Context, in s3response.PutObjectInput) (s3response.PutObjectOutput, error) {
	ctx := b.opCtx(rctx)
	bucket, key := str(in.Bucket), str(in.Key)
	p, dirMarker, err := objectPath(bucket, key)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	if dirMarker {
		return b.putDirMarker(ctx, bucket, p, in)
	}
	size := int64(-1)
	if in.ContentLength != nil {
		size = *in.ContentLength
	}
	if err := b.checkPutPreconditions(ctx, p, in.IfMatch, in.IfNoneMatch); err != nil {
		return s3response.PutObjectOutput{}, err
	}
	meta := objectMeta{ContentType: str(in.ContentType), Meta: in.Metadata}
	meta, err = b.writeObject(ctx, bucket, p, in.Body, size, in.Metadata[layoutMetaKey], meta)
	if err != nil {
		return s3response.PutObjectOutput{}, err
	}
	return s3response.PutObjectOutput{ETag: meta.ETag}, nil
}

// putDirMarker makes the directory a "dir/" key names (explicit: it stays
// when emptied).
func (b *braidBackend) putDirMarker(ctx context.Context, bucket, p string, in s3response.PutObjectInput) (s3response.PutObjectOutput, error) {
	var one [1]byte
	if in.ContentLength != nil && *in.ContentLength > 0 {
		return s3response.PutObjectOutput{}, s3err.GetAPIError(s3err.ErrDirectoryObjectContainsData)
	}
	if in.Body != nil {
		if n, _ := in.Body.Read(one[:]); n > 0 {
			return s3response.PutObjectOutput{}, s3err.GetAPIError(s3err.ErrDirectoryObjectContainsData)
		}
	}
	if err := b.makeDir(ctx, bucket, path.Dir(p)); err != nil {
		return s3response.PutObjectOutput{}, err
	}
	if err := b.cl.Mkdir(ctx, p, false); err != nil && !errors.Is(err, braid.ErrExists) {
		return s3response.PutObjectOutput{}, s3Error(err, s3err.ErrNoSuchBucket)
	}
	if fi, err := b.cl.Stat(ctx, p); err != nil || !fi.IsDir {
		return s3response.PutObjectOutput{}, s3err.GetAPIError(s3err.ErrObjectParentIsFile)
	}
	return s3response.PutObjectOutput{ETag: quote(emptyMD5)}, nil
}

func (b *braidBackend) checkPutPreconditions(ctx context.Context, p string, ifMatch, ifNoneMatch *string) error {
	if str(ifMatch) == "" && str(ifNoneMatch) == "" {
		return nil
	}
	oi, err := b.stat(ctx, p)
	exists := err == nil && !oi.dir
	if err != nil && !errors.Is(err, braid.ErrNotFound) {
		return s3Error(err, s3err.ErrNoSuchKey)
	}
	return backend.EvaluateObjectPutPreconditions(oi.meta.ETag, ifMatch, ifNoneMatch, exists)
}

// writeObject copies body (size bytes, or to EOF when size < 0) into a new
// file at p through a hidden temporary and returns its metadata as stored.
func (b *braidBackend) writeObject(ctx context.Context, bucket, p string, body io.Reader, size int64, layout string, meta objectMeta) (objectMeta, error) {
	if err := b.mayReplace(ctx, p); err != nil {
		return objectMeta{}, err
	}
	if err := b.makeParents(ctx, bucket, p); err != nil {
		return objectMeta{}, err
	}
	st, err := b.stage(ctx, bucket, body, size, layout, true)
	if err != nil {
		return objectMeta{}, err
	}
	meta.ETag = st.etag
	if err := b.commitObject(ctx, st, p, &meta, s3err.ErrNoSuchBucket); err != nil {
		b.discard(ctx, st.tmp)
		return objectMeta{}, err
	}
	return meta, nil
}

// staged is a finished, durable temporary file.
type staged struct {
	tmp  string
	attr braid.Attr // as committed by its Close
	etag string     // the MD5 of its bytes, quoted; "" when not hashed
}

// stage copies body (size bytes, or to EOF when size < 0) into a new hidden
// temporary file of bucket and closes it, durable. On error nothing is
// left behind.
func (b *braidBackend) stage(ctx context.Context, bucket string, body io.Reader, size int64, layout string, withMD5 bool) (staged, error) {
	tmp := tempPath(bucket)
	opts := braid.CreateOptions{Layout: layout, SizeHint: size}
	if id, ok := idOf(ctx); ok {
		opts.Uid, opts.Gid = id.owner()
	}
	f, err := b.cl.Create(ctx, tmp, opts)
	if errors.Is(err, braid.ErrNotFound) { // the bucket's first temporary
		if _, err := b.reservedSubdir(ctx, bucket, "tmp"); err != nil {
			return staged{}, err
		}
		f, err = b.cl.Create(ctx, tmp, opts)
	}
	if errors.Is(err, braid.ErrInvalid) {
		return staged{}, invalidArgument("layout %q: %v", layout, err)
	}
	if err != nil {
		return staged{}, s3Error(err, s3err.ErrNoSuchBucket)
	}
	var h hash.Hash
	if withMD5 {
		h = md5.New()
		body = io.TeeReader(body, h)
	}
	n, err := f.ReadFrom(body)
	switch {
	case err != nil:
		err = s3Error(err, s3err.ErrInternalError) // versitygw's own read errors (bad signature, digest) pass unchanged
	case size >= 0 && n != size:
		err = s3err.GetAPIError(s3err.ErrIncompleteBody)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = s3Error(cerr, s3err.ErrInternalError)
	}
	if err != nil {
		b.discard(ctx, tmp)
		return staged{}, err
	}
	st := staged{tmp: tmp, attr: f.Attr()}
	if withMD5 {
		st.etag = quote(hex.EncodeToString(h.Sum(nil)))
	}
	return st, nil
}

// discard removes a temporary file, even when the operation was canceled.
func (b *braidBackend) discard(ctx context.Context, tmp string) {
	_ = b.cl.Remove(context.WithoutCancel(ctx), tmp)
}

// commitObject records meta, completed with the file's size and mtime, on
// the finished temporary file and renames it over p: readers see the old
// object or the new one, whole. A missing
// destination directory is reported as notFound; the caller discards the
// temporary on error.
func (b *braidBackend) commitObject(ctx context.Context, st staged, p string, meta *objectMeta, notFound s3err.ErrorCode) error {
	meta.Size, meta.MtimeNs = st.attr.Size, st.attr.MtimeNs
	if err := b.setMeta(ctx, st.attr.Ino, *meta); err != nil {
		return err
	}
	if err := b.cl.Rename(ctx, st.tmp, p); err != nil {
		if fi, serr := b.cl.Stat(ctx, p); errors.Is(err, braid.ErrNotFound) && serr == nil && fi.Ino == st.attr.Ino {
			return nil // a replayed rename that had landed
		}
		return s3Error(err, notFound)
	}
	return nil
}

// setMeta writes an object's metadata xattr.
func (b *braidBackend) setMeta(ctx context.Context, ino uint64, meta objectMeta) error {
	v, err := json.Marshal(meta)
	if err != nil {
		return s3Error(err, s3err.ErrInternalError)
	}
	if len(v) > maxMetaBytes+1024 {
		return s3err.GetAPIError(s3err.ErrMetadataTooLarge)
	}
	_, err = b.cl.Xattr(ctx, braid.XattrRequest{Ino: ino, Op: "set", Name: metaXattr, Value: v})
	return s3Error(err, s3err.ErrNoSuchKey)
}

// makeParents creates the directories between the bucket and p; a file in
// the way makes the key both an object and a prefix, which a file system
// cannot hold. The bucket itself is never created (a PUT racing a
// DeleteBucket gets NoSuchBucket). Directories it creates are marked
// implicit: a delete that empties one removes it again, as an S3 prefix
// vanishes with its last key, while directories made through a mount or
// as "dir/" objects stay.
func (b *braidBackend) makeParents(ctx context.Context, bucket, p string) error {
	if err := b.makeDir(ctx, bucket, path.Dir(p)); err != nil {
		return err
	}
	if fi, err := b.cl.Stat(ctx, p); err == nil && fi.IsDir {
		return s3err.GetAPIError(s3err.ErrExistingObjectIsDirectory)
	}
	return nil
}

// makeDir makes sure dir exists, creating it and its parents below the
// bucket as implicit directories.
func (b *braidBackend) makeDir(ctx context.Context, bucket, dir string) error {
	fi, err := b.cl.Stat(ctx, dir)
	switch {
	case err == nil && fi.IsDir:
		return nil
	case err == nil, errors.Is(err, braid.ErrNotDir):
		return s3err.GetAPIError(s3err.ErrObjectParentIsFile)
	case !errors.Is(err, braid.ErrNotFound):
		return s3Error(err, s3err.ErrNoSuchBucket)
	case dir == "/"+bucket:
		return s3err.GetAPIError(s3err.ErrNoSuchBucket)
	}
	if err := b.makeDir(ctx, bucket, path.Dir(dir)); err != nil {
		return err
	}
	err = b.cl.Mkdir(ctx, dir, false)
	if err == nil {
		b.markImplicit(ctx, dir)
		return nil
	}
	if errors.Is(err, braid.ErrExists) {
		return b.makeDir(ctx, bucket, dir) // made meanwhile: a directory, or a file in the way
	}
	return s3Error(err, s3err.ErrNoSuchBucket)
}

const implicitXattr = "user.s3.implicit"

func (b *braidBackend) markImplicit(ctx context.Context, dir string) {
	if fi, err := b.cl.Stat(ctx, dir); err == nil {
		_, _ = b.cl.Xattr(ctx, braid.XattrRequest{Ino: fi.Ino, Op: "set", Name: implicitXattr, Value: []byte("1")})
	}
}

// reservedSubdir makes sure the bucket's reserved directory and its
// subdirectory name exist, without creating the bucket: a PUT racing a
// DeleteBucket gets NoSuchBucket.
func (b *braidBackend) reservedSubdir(ctx context.Context, bucket, name string) (string, error) {
	base := "/" + bucket + "/" + reservedDir
	sub := base + "/" + name
	err := b.cl.Mkdir(ctx, sub, false)
	if errors.Is(err, braid.ErrNotFound) { // the bucket's first use
		if err := b.cl.Mkdir(ctx, base, false); err != nil && !errors.Is(err, braid.ErrExists) {
			return "", s3Error(err, s3err.ErrNoSuchBucket)
		}
		err = b.cl.Mkdir(ctx, sub, false)
	}
	if err != nil && !errors.Is(err, braid.ErrExists) {
		return "", s3Error(err, s3err.ErrNoSuchBucket)
	}
	return sub, nil
}

// tempPath names a new hidden temporary file of bucket (its directory is
// made when a create finds it missing).
func tempPath(bucket string) string {
	return fmt.Sprintf("/%s/%s/tmp/%d-%s", bucket, reservedDir, time.Now().UnixNano(), randHex(12))
}

// randHex is n random bytes in hex.
func randHex(n int) string {
	r := make([]byte, n)
	_, _ = rand.Read(r)
	return hex.EncodeToString(r)
}

func (b *braidBackend) HeadObject(rctx context.Context, in *s3.HeadObjectInput) (*s3.HeadObjectOutput, error) {
	r, err := b.readRange(b.opCtx(rctx), str(in.Bucket), str(in.Key), backend.PreConditions{IfMatch: in.IfMatch,
		IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince}, str(in.Range))
	if err != nil {
		return nil, err
	}
	return &s3.HeadObjectOutput{ContentLength: &r.length, ContentRange: r.contentRange, ETag: &r.oi.meta.ETag,
		LastModified: &r.oi.mtime, Metadata: r.oi.meta.Meta, AcceptRanges: ptr("bytes"), ContentType: contentType(r.oi)}, nil
}

func (b *braidBackend) GetObject(rctx context.Context, in *s3.GetObjectInput) (*s3.GetObjectOutput, error) {
	ctx := b.opCtx(rctx)
	pre := backend.PreConditions{IfMatch: in.IfMatch, IfNoneMatch: in.IfNoneMatch, IfModSince: in.IfModifiedSince, IfUnmodeSince: in.IfUnmodifiedSince}
	bucket, key := str(in.Bucket), str(in.Key)
	if strings.HasSuffix(key, "/") { // a directory object: no bytes to open
		r, err := b.readRange(ctx, bucket, key, pre, str(in.Range))
		if err != nil {
			return nil, err
		}
		out := getOutput(r)
		out.Body = io.NopCloser(strings.NewReader(""))
		return out, nil
	}
	// Opened first, by path, and its attributes taken from the open: one
	// MDS call where a stat and an open by ino would be two, and a rename
	// over the key meanwhile cannot mix two objects in one response.
	oi, f, err := b.openObject(ctx, bucket, key)
	if err != nil {
		return nil, err
	}
	r, err := checkRange(oi, pre, str(in.Range))
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	out := getOutput(r)
	out.Body = &fileBody{f: f, r: io.NewSectionReader(f, r.start, r.length)}
	return out, nil
}

func getOutput(r rangeRead) *s3.GetObjectOutput {
	return &s3.GetObjectOutput{ContentLength: &r.length, ContentRange: r.contentRange, ETag: &r.oi.meta.ETag,
		LastModified: &r.oi.mtime, Metadata: r.oi.meta.Meta, AcceptRanges: ptr("bytes"), ContentType: contentType(r.oi)}
}

// openObject opens the file a key (not ending in "/") names.
func (b *braidBackend) openObject(ctx context.Context, bucket, key string) (objectInfo, *braid.File, error) {
	p, _, err := objectPath(bucket, key)
	if err != nil {
		return objectInfo{}, nil, err
	}
	f, err := b.cl.Open(ctx, p)
	if err != nil {
		return objectInfo{}, nil, b.missingObject(ctx, bucket, err)
	}
	a := f.Attr()
	oi, err := b.fileInfo(ctx, a.Ino, a.Size, a.MtimeNs)
	oi.mode, oi.uid, oi.gid = fs.FileMode(a.Mode).Perm(), a.Uid, a.Gid
	if err == nil {
		err = mayDo(ctx, oi, mdsproto.MayRead)
	}
	if err != nil {
		_ = f.Close()
		return objectInfo{}, nil, s3Error(err, s3err.ErrNoSuchKey)
	}
	return oi, f, nil
}

// missingObject is the S3 error for a key whose lookup failed with err:
// NoSuchBucket or NoSuchKey for a name that is not there (a directory
// where a file is asked for is not there either).
func (b *braidBackend) missingObject(ctx context.Context, bucket string, err error) error {
	if errors.Is(err, braid.ErrNotFound) || errors.Is(err, braid.ErrNotDir) || errors.Is(err, braid.ErrIsDir) {
		if _, berr := b.bucketDir(ctx, bucket); berr != nil {
			return berr
		}
		return s3err.GetAPIError(s3err.ErrNoSuchKey)
	}
	return s3Error(err, s3err.ErrNoSuchKey)
}

// rangeRead is what a GET or HEAD answers about: the object and the bytes
// asked for.
type rangeRead struct {
	oi            objectInfo
	start, length int64
	contentRange  *string // set for a Range request: the answer is 206
}

// readRange finds the object, checks the request's conditions against it
// and parses its Range header.
func (b *braidBackend) readRange(ctx context.Context, bucket, key string, pre backend.PreConditions, rng string) (rangeRead, error) {
	oi, err := b.objectFor(ctx, bucket, key)
	if err != nil {
		return rangeRead{}, err
	}
	return checkRange(oi, pre, rng)
}

// checkRange checks a request's conditions against the object and parses
// its Range header.
func checkRange(oi objectInfo, pre backend.PreConditions, rng string) (rangeRead, error) {
	if err := backend.EvaluatePreconditions(oi.meta.ETag, oi.mtime, pre); err != nil {
		return rangeRead{}, err
	}
	start, length, ranged, err := backend.ParseObjectRange(oi.size, rng)
	if err != nil {
		return rangeRead{}, err
	}
	r := rangeRead{oi: oi, start: start, length: length}
	if ranged {
		r.contentRange = ptr(fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, oi.size))
	}
	return r, nil
}

// fileBody streams a range of an open file and closes it at the end.
type fileBody struct {
	f *braid.File
	r io.Reader
}

func (fb *fileBody) Read(p []byte) (int, error) { return fb.r.Read(p) }
func (fb *fileBody) Close() error               { return fb.f.Close() }

func contentType(oi objectInfo) *string {
	if oi.dir {
		return ptr("application/x-directory")
	}
	if oi.meta.ContentType == "" {
		return ptr("binary/octet-stream")
	}
	return ptr(oi.meta.ContentType)
}

func ptr[T any](v T) *T { return &v }

// objectFor finds the object named by key: a file, or for a key ending in
// "/" a directory.
func (b *braidBackend) objectFor(ctx context.Context, bucket, key string) (objectInfo, error) {
	p, dirMarker, err := objectPath(bucket, key)
	if err != nil {
		return objectInfo{}, err
	}
	oi, err := b.stat(ctx, p)
	if err == nil && oi.dir != dirMarker {
		err = braid.ErrNotFound // "a" names no directory object, "a/" no file
	}
	if err != nil {
		return objectInfo{}, b.missingObject(ctx, bucket, err)
	}
	return oi, mayDo(ctx, oi, mdsproto.MayRead)
}

// DeleteObject removes the key, and the directories its removal empties.
// Deleting a key that does not exist succeeds, as in S3.
func (b *braidBackend) DeleteObject(rctx context.Context, in *s3.DeleteObjectInput) (*s3.DeleteObjectOutput, error) {
	ctx := b.opCtx(rctx)
	bucket, key := str(in.Bucket), str(in.Key)
	if err := b.deleteKey(ctx, bucket, key); err != nil {
		return nil, err
	}
	return &s3.DeleteObjectOutput{}, nil
}

func (b *braidBackend) deleteKey(ctx context.Context, bucket, key string) error {
	p, dirMarker, err := objectPath(bucket, key)
	if err != nil {
		return err
	}
	fi, err := b.cl.Stat(ctx, p)
	switch {
	case errors.Is(err, braid.ErrNotFound) || errors.Is(err, braid.ErrNotDir):
		return nil
	case err != nil:
		return s3Error(err, s3err.ErrNoSuchKey)
	case fi.IsDir != dirMarker:
		return nil // "a" names no directory object, "a/" no file
	}
	if err := b.cl.Remove(ctx, p); err != nil && !errors.Is(err, braid.ErrNotFound) {
		if fi.IsDir && errors.Is(err, braid.ErrNotEmpty) {
			return nil // the marker of a directory that holds other keys
		}
		return s3Error(err, s3err.ErrNoSuchKey)
	}
	b.removeEmptyParents(ctx, bucket, path.Dir(p))
	return nil
}

// removeEmptyParents removes the implicit directories (see makeParents)
// that a delete left empty, up to the bucket.
func (b *braidBackend) removeEmptyParents(ctx context.Context, bucket, dir string) {
	root := "/" + bucket
	for depth := 0; dir != root && strings.HasPrefix(dir, root+"/") && depth < maxKeyBytes; depth++ {
		fi, err := b.cl.Stat(ctx, dir)
		if err != nil {
			return
		}
		if _, err := b.cl.Xattr(ctx, braid.XattrRequest{Ino: fi.Ino, Op: "get", Name: implicitXattr}); err != nil {
			return // made through a mount or as a "dir/" object: kept
		}
		if b.cl.Remove(ctx, dir) != nil {
			return // not empty, or gone: either way done
		}
		dir = path.Dir(dir)
	}
}
