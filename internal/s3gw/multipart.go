package s3gw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/braidfs/braid"
)

// A multipart upload is a directory /BUCKET/.braid-s3/uploads/ID whose
// xattr user.s3.upload records the key and the object's metadata; each
// part is a file named by its five-digit number, written like an object
// (hidden temporary, then renamed in) with its MD5 in user.s3.
// Completion claims the directory by renaming it to ID.completing.TOKEN,
// copies the parts in order into one hidden temporary and renames that
// over the key: readers see the old object or the whole new one (doc.go
// has the whole format).
const (
	uploadXattr       = "user.s3.upload"
	completingSuffix  = ".completing"
	abortingSuffix    = ".aborting"
	maxPartNumber     = 10_000
	defaultListParts  = 1000
	maxListedUploads  = 100_000 // uploads in progress one bucket listing reads
	uploadIDRandBytes = 8
	uploadIDLen       = 16 + 2*uploadIDRandBytes // hex digits
)

// uploadMeta is what CreateMultipartUpload records for the object.
type uploadMeta struct {
	Key         string            `json:"key"`
	InitiatedNs int64             `json:"initiated_ns"`
	ContentType string            `json:"content_type,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
}

// newUploadID is the initiation time and random bits in hex: IDs sort in
// the order uploads began, which is how S3 lists uploads of one key.
func newUploadID(now time.Time) string {
	return fmt.Sprintf("%016x%s", uint64(now.UnixNano()), randHex(uploadIDRandBytes))
}

// validUploadID accepts only what newUploadID makes: an ID from a client
// never names another path.
func validUploadID(id string) bool {
	if len(id) != uploadIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func uploadsDir(bucket string) string { return "/" + bucket + "/" + reservedDir + "/uploads" }

// claimName names an upload directory claimed by one completion or abort:
// ID.completing.TOKEN or ID.aborting.TOKEN. The token makes the claim this
// request's own, so a rename the client library replays (it reports
// not-found the second time) can be recognised.
func claimName(dir, kind string) string { return dir + kind + "." + randHex(4) }

// claimOf splits an uploads entry into its upload ID and claim kind ("" for
// an unclaimed upload).
func claimOf(name string) (id, kind string) {
	if len(name) <= uploadIDLen {
		return name, ""
	}
	id, rest := name[:uploadIDLen], name[uploadIDLen:]
	for _, k := range []string{completingSuffix, abortingSuffix} {
		if strings.HasPrefix(rest, k+".") {
			return id, k
		}
	}
	return name, ""
}

// claimedAs reports whether upload id is claimed by a completion or abort
// (kind) in progress. Claims sort right after their ID.
func (b *braidBackend) claimedAs(ctx context.Context, bucket, id, kind string) bool {
	fi, err := b.cl.Stat(ctx, uploadsDir(bucket))
	if err != nil {
		return false
	}
	ents, _, err := b.cl.ReadDirAt(ctx, fi.Ino, id, 4)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if cid, k := claimOf(e.Name); cid == id && k == kind {
			return true
		}
	}
	return false
}

// errCompleting answers a request for an upload whose completion is still
// copying: retryable, unlike NoSuchUpload, so a client that timed out on
// a long completion and retried learns the outcome on a later try.
func errCompleting(id string) error {
	return s3err.APIError{Code: "SlowDown", HTTPStatusCode: 503,
		Description: fmt.Sprintf("upload %s is being completed; retry", id)}
}

func partName(n int32) string { return fmt.Sprintf("%05d", n) }

// upload finds an upload in progress of bucket/key.
func (b *braidBackend) upload(ctx context.Context, bucket, key, id string) (uploadMeta, string, error) {
	if !validUploadID(id) {
		return uploadMeta{}, "", s3err.GetNoSuchUploadErr(id)
	}
	dir := uploadsDir(bucket) + "/" + id
	u, err := b.readUpload(ctx, dir)
	if errors.Is(err, braid.ErrNotFound) {
		if _, berr := b.bucketDir(ctx, bucket); berr != nil {
			return uploadMeta{}, "", berr
		}
		return uploadMeta{}, "", s3err.GetNoSuchUploadErr(id)
	}
	if err != nil {
		return uploadMeta{}, "", s3Error(err, s3err.ErrNoSuchUpload)
	}
	if u.Key != key {
		return uploadMeta{}, "", s3err.GetNoSuchUploadErr(id)
	}
	return u, dir, nil
}

func (b *braidBackend) readUpload(ctx context.Context, dir string) (uploadMeta, error) {
	fi, err := b.cl.Stat(ctx, dir)
	if err != nil {
		return uploadMeta{}, err
	}
	return b.uploadOfIno(ctx, fi.Ino)
}

func (b *braidBackend) uploadOfIno(ctx context.Context, ino uint64) (uploadMeta, error) {
	r, err := b.cl.Xattr(ctx, braid.XattrRequest{Ino: ino, Op: "get", Name: uploadXattr})
	if err != nil {
		return uploadMeta{}, err
	}
	var u uploadMeta
	if err := json.Unmarshal(r.Value, &u); err != nil {
		return uploadMeta{}, fmt.Errorf("upload %d: %w", ino, err)
	}
	return u, nil
}

func (b *braidBackend) CreateMultipartUpload(rctx context.Context, in s3response.CreateMultipartUploadInput) (s3response.InitiateMultipartUploadResult, error) {
	ctx := b.opCtx(rctx)
	bucket, key := str(in.Bucket), str(in.Key)
	_, dirMarker, err := objectPath(bucket, key)
	if err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	if dirMarker {
		return s3response.InitiateMultipartUploadResult{}, s3err.GetAPIError(s3err.ErrDirectoryObjectContainsData)
	}
	parent, err := b.reservedSubdir(ctx, bucket, "uploads")
	if err != nil {
		return s3response.InitiateMultipartUploadResult{}, err
	}
	now := time.Now()
	id := newUploadID(now)
	v, err := json.Marshal(uploadMeta{Key: key, InitiatedNs: now.UnixNano(), ContentType: str(in.ContentType), Meta: in.Metadata})
	if err != nil {
		return s3response.InitiateMultipartUploadResult{}, s3Error(err, s3err.ErrInternalError)
	}
	if len(v) > maxMetaBytes+maxKeyBytes+1024 {
		return s3response.InitiateMultipartUploadResult{}, s3err.GetAPIError(s3err.ErrMetadataTooLarge)
	}
	dir := parent + "/" + id
	if err := b.cl.Mkdir(ctx, dir, false); err != nil {
		return s3response.InitiateMultipartUploadResult{}, s3Error(err, s3err.ErrNoSuchBucket)
	}
	fi, err := b.cl.Stat(ctx, dir)
	if err == nil {
		_, err = b.cl.Xattr(ctx, braid.XattrRequest{Ino: fi.Ino, Op: "set", Name: uploadXattr, Value: v})
	}
	if err != nil {
		_ = b.cl.Remove(context.WithoutCancel(ctx), dir)
		return s3response.InitiateMultipartUploadResult{}, s3Error(err, s3err.ErrNoSuchBucket)
	}
	return s3response.InitiateMultipartUploadResult{Bucket: bucket, Key: key, UploadId: id}, nil
}

func (b *braidBackend) UploadPart(rctx context.Context, in *s3.UploadPartInput) (*s3.UploadPartOutput, error) {
	ctx := b.opCtx(rctx)
	size := int64(-1)
	if in.ContentLength != nil {
		size = *in.ContentLength
	}
	etag, err := b.writePart(ctx, str(in.Bucket), str(in.Key), str(in.UploadId), in.PartNumber, in.Body, size)
	if err != nil {
		return nil, err
	}
	return &s3.UploadPartOutput{ETag: &etag}, nil
}

// writePart stores body as part n of an upload, replacing an earlier
// upload of the same part whole.
func (b *braidBackend) writePart(ctx context.Context, bucket, key, id string, n *int32, body io.Reader, size int64) (string, error) {
	if n == nil || *n < 1 || *n > maxPartNumber {
		return "", s3err.GetAPIError(s3err.ErrInvalidPartNumberRange)
	}
	u, dir, err := b.upload(ctx, bucket, key, id)
	if err != nil {
		return "", err
	}
	st, err := b.stage(ctx, bucket, body, size, u.Meta[layoutMetaKey], true)
	if err != nil {
		return "", err
	}
	if err := b.commitObject(ctx, st, dir+"/"+partName(*n), &objectMeta{ETag: st.etag}, s3err.ErrNoSuchUpload); err != nil {
		b.discard(ctx, st.tmp)
		if hasCode(err, "NoSuchUpload") {
			return "", s3err.GetNoSuchUploadErr(id) // aborted meanwhile
		}
		return "", err
	}
	return st.etag, nil
}

// partInfo is one stored part.
type partInfo struct {
	number int32
	ino    uint64
	meta   objectMeta
	mtime  time.Time
}

// parts lists the parts stored in an upload directory in number order:
// those numbered above after, at most limit of them (0: all).
func (b *braidBackend) parts(ctx context.Context, dir string, after int32, limit int) ([]partInfo, error) {
	fi, err := b.cl.Stat(ctx, dir)
	if err != nil {
		return nil, err
	}
	var out []partInfo
	from := ""
	if after > 0 {
		from = partName(after) // names are zero-padded: directory order is number order
	}
	err = b.eachEntry(ctx, fi.Ino, from, maxPartNumber+listPage, func(e braid.DirEntry) bool {
		n, err := strconv.ParseInt(e.Name, 10, 32)
		if err != nil || e.Inode.Type != braid.TypeFile || n < 1 || n > maxPartNumber || e.Name != partName(int32(n)) {
			return true // a part's temporary never lives here; anything else is not a part
		}
		p := partInfo{number: int32(n), ino: e.Inode.Ino, mtime: timeOf(e.Inode.MtimeNs)}
		r, err := b.cl.Xattr(ctx, braid.XattrRequest{Ino: e.Inode.Ino, Op: "get", Name: metaXattr})
		if err != nil || json.Unmarshal(r.Value, &p.meta) != nil || p.meta.Size != e.Inode.Size {
			return true // replaced or removed meanwhile
		}
		out = append(out, p)
		return limit <= 0 || len(out) < limit
	})
	return out, err
}

func (b *braidBackend) ListParts(rctx context.Context, in *s3.ListPartsInput) (s3response.ListPartsResult, error) {
	ctx := b.opCtx(rctx)
	bucket, key, id := str(in.Bucket), str(in.Key), str(in.UploadId)
	out := s3response.ListPartsResult{Bucket: bucket, Key: key, UploadID: id, MaxParts: defaultListParts, StorageClass: types.StorageClassStandard}
	if in.MaxParts != nil && *in.MaxParts >= 0 && *in.MaxParts < defaultListParts {
		out.MaxParts = int(*in.MaxParts)
	}
	if m := str(in.PartNumberMarker); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 0 {
			return out, invalidArgument("part-number-marker %q is not a part number", m)
		}
		out.PartNumberMarker = n
	}
	_, dir, err := b.upload(ctx, bucket, key, id)
	if err != nil {
		return out, err
	}
	if out.PartNumberMarker >= maxPartNumber {
		return out, nil // no part numbers after it
	}
	parts, err := b.parts(ctx, dir, int32(out.PartNumberMarker), out.MaxParts+1)
	if err != nil {
		return out, s3Error(err, s3err.ErrNoSuchUpload)
	}
	for _, p := range parts {
		if len(out.Parts) == out.MaxParts {
			out.IsTruncated = true
			break
		}
		out.Parts = append(out.Parts, s3response.Part{PartNumber: int(p.number), LastModified: p.mtime, ETag: p.meta.ETag, Size: p.meta.Size})
		out.NextPartNumberMarker = int(p.number)
	}
	return out, nil
}

func (b *braidBackend) AbortMultipartUpload(rctx context.Context, in *s3.AbortMultipartUploadInput) error {
	ctx := b.opCtx(rctx)
	_, dir, err := b.upload(ctx, str(in.Bucket), str(in.Key), str(in.UploadId))
	if err != nil {
		return err
	}
	// Claim it as completion does, so that a racing completion cannot read
	// parts this removes.
	gone := claimName(dir, abortingSuffix)
	if err := b.renameClaim(ctx, dir, gone); err != nil {
		if errors.Is(err, braid.ErrNotFound) {
			return s3err.GetNoSuchUploadErr(str(in.UploadId))
		}
		return s3Error(err, s3err.ErrNoSuchUpload)
	}
	return s3Error(b.removeTree(ctx, gone), s3err.ErrNoSuchUpload)
}

// renameClaim renames an upload directory to this request's claim; a
// not-found from a replayed rename that had landed is success.
func (b *braidBackend) renameClaim(ctx context.Context, dir, claim string) error {
	err := b.cl.Rename(ctx, dir, claim)
	if errors.Is(err, braid.ErrNotFound) {
		if _, serr := b.cl.Stat(ctx, claim); serr == nil {
			return nil
		}
	}
	return err
}

// removeTree removes a directory of files (an upload).
func (b *braidBackend) removeTree(ctx context.Context, dir string) error {
	fi, err := b.cl.Stat(ctx, dir)
	if err != nil {
		return err
	}
	for page := 0; page <= maxPartNumber; page++ {
		ents, _, err := b.cl.ReadDirAt(ctx, fi.Ino, "", listPage)
		if err != nil {
			return err
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if err := b.cl.RemoveAt(ctx, fi.Ino, e.Name, false); err != nil && !errors.Is(err, braid.ErrNotFound) {
				return err
			}
		}
	}
	return b.cl.Remove(ctx, dir)
}

func (b *braidBackend) CompleteMultipartUpload(rctx context.Context, in *s3.CompleteMultipartUploadInput) (s3response.CompleteMultipartUploadResult, string, error) {
	ctx := b.opCtx(rctx)
	bucket, key, id := str(in.Bucket), str(in.Key), str(in.UploadId)
	out := s3response.CompleteMultipartUploadResult{Bucket: &bucket, Key: &key}
	if in.MultipartUpload == nil || len(in.MultipartUpload.Parts) == 0 {
		return out, "", s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	want := in.MultipartUpload.Parts
	if len(want) > maxPartNumber {
		return out, "", s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	etag, err := backend.ComputeMultipartETagFromPartETags(want)
	if err != nil {
		return out, "", err
	}
	out.ETag = &etag
	p, _, err := objectPath(bucket, key)
	if err != nil {
		return out, "", err
	}
	u, dir, err := b.upload(ctx, bucket, key, id)
	if hasCode(err, "NoSuchUpload") {
		return out, "", b.notPending(ctx, bucket, p, id, etag)
	}
	if err != nil {
		return out, "", err
	}
	if err := b.checkPutPreconditions(ctx, p, in.IfMatch, in.IfNoneMatch); err != nil {
		return out, "", err
	}
	have, err := b.parts(ctx, dir, 0, 0)
	if err != nil {
		return out, "", s3Error(err, s3err.ErrNoSuchUpload)
	}
	chosen, size, err := chooseParts(id, want, have)
	if err != nil {
		return out, "", err
	}
	if in.MpuObjectSize != nil && *in.MpuObjectSize != size {
		return out, "", s3err.GetIncorrectMpObjectSizeErr(size, *in.MpuObjectSize)
	}
	claimed := claimName(dir, completingSuffix)
	if err := b.renameClaim(ctx, dir, claimed); err != nil {
		if errors.Is(err, braid.ErrNotFound) {
			return out, "", b.notPending(ctx, bucket, p, id, etag) // completed or aborted by another request
		}
		return out, "", s3Error(err, s3err.ErrNoSuchUpload)
	}
	meta := objectMeta{ETag: etag, ContentType: u.ContentType, Meta: u.Meta, UploadID: id}
	if err := b.assemble(ctx, bucket, p, chosen, size, u.Meta[layoutMetaKey], meta); err != nil {
		_ = b.cl.Rename(context.WithoutCancel(ctx), claimed, dir) // the client may retry
		return out, "", err
	}
	// Done: the parts are garbage. Renamed to an abort's claim first, so
	// that if removing them is cut short the sweeper removes the rest and
	// never hands the upload back.
	if done := claimName(dir, abortingSuffix); b.cl.Rename(ctx, claimed, done) == nil {
		claimed = done
	}
	_ = b.removeTree(ctx, claimed)
	return out, "", nil
}

// notPending answers a completion of an upload that is no longer pending:
// success for a retry of a completion that succeeded, SlowDown while
// another completion is still copying, NoSuchUpload otherwise.
func (b *braidBackend) notPending(ctx context.Context, bucket, p, id, etag string) error {
	switch {
	case b.completedBy(ctx, p, id, etag):
		return nil
	case b.claimedAs(ctx, bucket, id, completingSuffix):
		return errCompleting(id)
	}
	return s3err.GetNoSuchUploadErr(id)
}

// chooseParts checks the client's part list against the stored parts: in
// ascending order, each present with the ETag the client has, each but
// the last at least 5 MiB.
func chooseParts(id string, want []types.CompletedPart, have []partInfo) ([]partInfo, int64, error) {
	byNumber := make(map[int32]partInfo, len(have))
	for _, p := range have {
		byNumber[p.number] = p
	}
	chosen := make([]partInfo, 0, len(want))
	var size int64
	last := int32(0)
	for i, w := range want {
		if w.PartNumber == nil || w.ETag == nil {
			return nil, 0, s3err.GetAPIError(s3err.ErrMalformedXML)
		}
		n := *w.PartNumber
		if n < 1 || n > maxPartNumber {
			return nil, 0, s3err.GetInvalidArgumentErr(s3err.InvalidArgCompleteMpPartNumber, fmt.Sprint(n))
		}
		if n <= last {
			return nil, 0, s3err.GetAPIError(s3err.ErrInvalidPartOrder)
		}
		last = n
		p, ok := byNumber[n]
		if !ok || strings.Trim(p.meta.ETag, `"`) != strings.Trim(*w.ETag, `"`) {
			return nil, 0, s3err.GetInvalidPartErr(id, n, *w.ETag)
		}
		if i < len(want)-1 && p.meta.Size < backend.MinPartSize {
			return nil, 0, s3err.GetEntityTooSmallErr(p.meta.Size, backend.MinPartSize)
		}
		size += p.meta.Size
		chosen = append(chosen, p)
	}
	return chosen, size, nil
}

// completedBy reports whether the object at p is the result of completing
// upload id with this ETag (a client retrying a completion whose answer
// it lost).
func (b *braidBackend) completedBy(ctx context.Context, p, id, etag string) bool {
	oi, err := b.stat(ctx, p)
	return err == nil && !oi.dir && oi.meta.UploadID == id && oi.meta.ETag == etag
}

// assemble copies the parts in order into a new object at p.
func (b *braidBackend) assemble(ctx context.Context, bucket, p string, parts []partInfo, size int64, layout string, meta objectMeta) error {
	if err := b.mayReplace(ctx, p); err != nil {
		return err
	}
	if err := b.makeParents(ctx, bucket, p); err != nil {
		return err
	}
	pr := &partsReader{ctx: ctx, cl: b.cl, parts: parts}
	defer pr.close()
	st, err := b.stage(ctx, bucket, pr, size, layout, false)
	if err != nil {
		return err
	}
	if err := b.commitObject(ctx, st, p, &meta, s3err.ErrNoSuchBucket); err != nil {
		b.discard(ctx, st.tmp)
		return err
	}
	return nil
}

// partsReader reads the parts one after another, opening each by inode
// when the previous one ends.
type partsReader struct {
	ctx   context.Context
	cl    *braid.Client
	parts []partInfo
	f     *braid.File
	r     io.Reader
}

func (pr *partsReader) Read(p []byte) (int, error) {
	for {
		if pr.r == nil {
			if len(pr.parts) == 0 {
				return 0, io.EOF
			}
			f, err := pr.cl.OpenIno(pr.ctx, pr.parts[0].ino, false)
			if err != nil {
				return 0, fmt.Errorf("part %d: %w", pr.parts[0].number, err)
			}
			pr.f, pr.r = f, io.NewSectionReader(f, 0, pr.parts[0].meta.Size)
			pr.parts = pr.parts[1:]
		}
		n, err := pr.r.Read(p)
		if err == io.EOF {
			pr.close()
			err = nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

func (pr *partsReader) close() {
	if pr.f != nil {
		_ = pr.f.Close()
	}
	pr.f, pr.r = nil, nil
}

func (b *braidBackend) ListMultipartUploads(rctx context.Context, in *s3.ListMultipartUploadsInput) (s3response.ListMultipartUploadsResult, error) {
	ctx := b.opCtx(rctx)
	bucket := str(in.Bucket)
	out := s3response.ListMultipartUploadsResult{Bucket: bucket, KeyMarker: str(in.KeyMarker), UploadIDMarker: str(in.UploadIdMarker),
		Delimiter: str(in.Delimiter), Prefix: str(in.Prefix), MaxUploads: defaultListParts}
	if in.MaxUploads != nil && *in.MaxUploads >= 0 && *in.MaxUploads < defaultListParts {
		out.MaxUploads = int(*in.MaxUploads)
	}
	if _, err := b.bucketDir(ctx, bucket); err != nil {
		return out, err
	}
	all, err := b.allUploads(ctx, bucket)
	if err != nil {
		return out, err
	}
	pageUploads(&out, all)
	return out, nil
}

// pendingUpload is one upload in progress as listings show it.
type pendingUpload struct {
	id string
	u  uploadMeta
}

// allUploads reads every upload in progress of bucket, sorted by key and
// then by ID (initiation order).
func (b *braidBackend) allUploads(ctx context.Context, bucket string) ([]pendingUpload, error) {
	fi, err := b.cl.Stat(ctx, uploadsDir(bucket))
	if errors.Is(err, braid.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, s3Error(err, s3err.ErrNoSuchBucket)
	}
	var all []pendingUpload
	seen := 0
	err = b.eachEntry(ctx, fi.Ino, "", maxListedUploads+1, func(e braid.DirEntry) bool {
		seen++
		// Claimed uploads (ID.completing.…, ID.aborting.…) are being
		// completed or aborted: no longer listed.
		if !validUploadID(e.Name) || e.Inode.Type != braid.TypeDir {
			return true
		}
		if u, err := b.uploadOfIno(ctx, e.Inode.Ino); err == nil { // else completed or aborted meanwhile
			all = append(all, pendingUpload{id: e.Name, u: u})
		}
		return true
	})
	if err != nil {
		return nil, s3Error(err, s3err.ErrNoSuchBucket)
	}
	if seen > maxListedUploads {
		return nil, s3err.APIError{Code: "InternalError", HTTPStatusCode: 500,
			Description: fmt.Sprintf("more than %d multipart uploads in progress in bucket %s: abort some", maxListedUploads, bucket)}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].u.Key != all[j].u.Key {
			return all[i].u.Key < all[j].u.Key
		}
		return all[i].id < all[j].id
	})
	return all, nil
}

// pageUploads fills one page of a ListMultipartUploads answer from all
// uploads, sorted: prefix, delimiter and the key and upload-id markers
// as S3 defines them.
func pageUploads(out *s3response.ListMultipartUploadsResult, all []pendingUpload) {
	seen := map[string]bool{}
	for _, p := range all {
		key := p.u.Key
		if !strings.HasPrefix(key, out.Prefix) || !afterUploadMarker(key, p.id, out.KeyMarker, out.UploadIDMarker) {
			continue
		}
		cp := ""
		if out.Delimiter != "" {
			if i := strings.Index(key[len(out.Prefix):], out.Delimiter); i >= 0 {
				cp = key[:len(out.Prefix)+i+len(out.Delimiter)]
			}
		}
		if cp != "" && (seen[cp] || cp == out.KeyMarker) {
			continue
		}
		if len(out.Uploads)+len(out.CommonPrefixes) == out.MaxUploads {
			out.IsTruncated = true
			return
		}
		if cp != "" {
			seen[cp] = true
			out.CommonPrefixes = append(out.CommonPrefixes, s3response.CommonPrefix{Prefix: cp})
			out.NextKeyMarker, out.NextUploadIDMarker = cp, ""
			continue
		}
		out.Uploads = append(out.Uploads, s3response.Upload{Key: key, UploadID: p.id, Initiated: timeOf(p.u.InitiatedNs),
			StorageClass: types.StorageClassStandard})
		out.NextKeyMarker, out.NextUploadIDMarker = key, p.id
	}
}

// afterUploadMarker: with only a key marker, uploads of later keys; with an
// upload-id marker too, also the later uploads of the marker's key.
func afterUploadMarker(key, id, keyMarker, idMarker string) bool {
	if keyMarker == "" {
		return true
	}
	if idMarker == "" {
		return key > keyMarker
	}
	return key > keyMarker || key == keyMarker && id > idMarker
}
