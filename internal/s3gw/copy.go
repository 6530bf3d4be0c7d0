package s3gw

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/backend"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
)

// maxDeleteKeys is S3's limit on one DeleteObjects request.
const maxDeleteKeys = 1000

// copySource finds the object an x-amz-copy-source header names, checks
// the request's x-amz-copy-source-if-* conditions against it and, for a
// file, opens it (as a GET does: the bytes copied are those of the object
// checked). The caller closes src.f.
func (b *braidBackend) copySource(ctx context.Context, header string, pre backend.PreConditions) (copySrc, error) {
	bucket, key, version, err := backend.ParseCopySource(header)
	if err != nil {
		return copySrc{}, err
	}
	if !validBucketName(bucket) {
		return copySrc{}, s3err.GetAPIError(s3err.ErrInvalidBucketName)
	}
	if version != "" {
		return copySrc{}, s3err.GetInvalidArgumentErr(s3err.InvalidArgVersionId, version) // no versioning
	}
	p, dirMarker, err := objectPath(bucket, key)
	if err != nil {
		return copySrc{}, err
	}
	src := copySrc{path: p}
	if dirMarker {
		src.objectInfo, err = b.objectFor(ctx, bucket, key)
	} else {
		src.objectInfo, src.f, err = b.openObject(ctx, bucket, key)
	}
	if err != nil {
		return copySrc{}, err
	}
	if err := backend.EvaluatePreconditions(src.meta.ETag, src.mtime, pre); err != nil {
		src.close()
		return copySrc{}, err
	}
	return src, nil
}

// copySrc is the object a copy reads.
type copySrc struct {
	objectInfo
	path string
	f    *braid.File // nil for a directory object
}

func (s copySrc) close() {
	if s.f != nil {
		_ = s.f.Close()
	}
}

// CopyObject copies through the gateway: read from the OSDs, written to
// new ones, as a new file (its own layout, its own MD5).
func (b *braidBackend) CopyObject(rctx context.Context, in s3response.CopyObjectInput) (s3response.CopyObjectOutput, error) {
	ctx := b.opCtx(rctx)
	src, err := b.copySource(ctx, str(in.CopySource), backend.PreConditions{IfMatch: in.CopySourceIfMatch,
		IfNoneMatch: in.CopySourceIfNoneMatch, IfModSince: in.CopySourceIfModifiedSince, IfUnmodeSince: in.CopySourceIfUnmodifiedSince})
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	defer src.close()
	bucket := str(in.Bucket)
	p, dirMarker, err := objectPath(bucket, str(in.Key))
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	meta := objectMeta{ContentType: src.meta.ContentType, Meta: src.meta.Meta}
	if in.MetadataDirective == types.MetadataDirectiveReplace {
		meta = objectMeta{ContentType: str(in.ContentType), Meta: in.Metadata}
	}
	switch {
	case p == src.path && src.dir != dirMarker: // "a" onto "a/" or the reverse
		return s3response.CopyObjectOutput{}, s3err.GetAPIError(s3err.ErrExistingObjectIsDirectory)
	case p == src.path:
		return b.replaceMeta(ctx, src.objectInfo, meta, in.MetadataDirective)
	case src.dir || dirMarker:
		if !src.dir || !dirMarker {
			return s3response.CopyObjectOutput{}, s3err.GetAPIError(s3err.ErrDirectoryObjectContainsData)
		}
		out, err := b.putDirMarker(ctx, bucket, p, s3response.PutObjectInput{})
		return copyOutput(out.ETag, time.Now()), err
	}
	meta, err = b.writeObject(ctx, bucket, p, io.NewSectionReader(src.f, 0, src.size), src.size, meta.Meta[layoutMetaKey], meta)
	if err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	return copyOutput(meta.ETag, timeOf(meta.MtimeNs)), nil
}

// replaceMeta is a copy of an object onto itself: S3's way to change its
// metadata, which must then be replaced.
func (b *braidBackend) replaceMeta(ctx context.Context, src objectInfo, meta objectMeta, directive types.MetadataDirective) (s3response.CopyObjectOutput, error) {
	if directive != types.MetadataDirectiveReplace || src.dir {
		return s3response.CopyObjectOutput{}, s3err.GetAPIError(s3err.ErrInvalidCopyDest)
	}
	if err := mayDo(ctx, src, mdsproto.MayWrite); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	meta.ETag, meta.UploadID = src.meta.ETag, src.meta.UploadID
	meta.Size, meta.MtimeNs = src.size, src.mtime.UnixNano()
	if err := b.setMeta(ctx, src.ino, meta); err != nil {
		return s3response.CopyObjectOutput{}, err
	}
	return copyOutput(meta.ETag, src.mtime), nil
}

func copyOutput(etag string, mtime time.Time) s3response.CopyObjectOutput {
	return s3response.CopyObjectOutput{CopyObjectResult: &s3response.CopyObjectResult{ETag: &etag, LastModified: &mtime}}
}

// UploadPartCopy stores a range of an existing object as a part.
func (b *braidBackend) UploadPartCopy(rctx context.Context, in *s3.UploadPartCopyInput) (s3response.CopyPartResult, error) {
	ctx := b.opCtx(rctx)
	src, err := b.copySource(ctx, str(in.CopySource), backend.PreConditions{IfMatch: in.CopySourceIfMatch,
		IfNoneMatch: in.CopySourceIfNoneMatch, IfModSince: in.CopySourceIfModifiedSince, IfUnmodeSince: in.CopySourceIfUnmodifiedSince})
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	defer src.close()
	if src.dir {
		return s3response.CopyPartResult{}, s3err.GetAPIError(s3err.ErrNoSuchKey)
	}
	start, length, err := backend.ParseCopySourceRange(src.size, str(in.CopySourceRange))
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	length = min(length, src.size-start)
	etag, err := b.writePart(ctx, str(in.Bucket), str(in.Key), str(in.UploadId), in.PartNumber, io.NewSectionReader(src.f, start, length), length)
	if err != nil {
		return s3response.CopyPartResult{}, err
	}
	return s3response.CopyPartResult{ETag: &etag, LastModified: time.Now()}, nil
}

// DeleteObjects deletes each key as DeleteObject does and reports each.
func (b *braidBackend) DeleteObjects(rctx context.Context, in *s3.DeleteObjectsInput) (s3response.DeleteResult, error) {
	ctx := b.opCtx(rctx)
	var out s3response.DeleteResult
	if in.Delete == nil || len(in.Delete.Objects) > maxDeleteKeys {
		return out, s3err.GetAPIError(s3err.ErrMalformedXML)
	}
	bucket := str(in.Bucket)
	if _, err := b.bucketDir(ctx, bucket); err != nil {
		return out, err
	}
	for _, o := range in.Delete.Objects {
		key := str(o.Key)
		err := b.deleteKey(ctx, bucket, key)
		if err == nil {
			out.Deleted = append(out.Deleted, types.DeletedObject{Key: ptr(key)})
			continue
		}
		var apiErr s3err.S3Error
		code, msg := "InternalError", err.Error()
		if errors.As(err, &apiErr) {
			code, msg = apiErr.BaseError().Code, apiErr.BaseError().Description
		}
		out.Error = append(out.Error, types.Error{Key: ptr(key), Code: &code, Message: &msg})
	}
	return out, nil
}
