// Package s3gw serves the braid namespace over the S3 protocol.
//
// The HTTP layer, SigV4 checking (header, presigned, UNSIGNED-PAYLOAD and
// aws-chunked streaming payloads), ACL checks and the XML shapes are
// versitygw's (github.com/versity/versitygw, embedded as a library); this
// package is its backend over the braid client library, and its IAM over
// the access keys the MDS keeps (the MDS derives SigV4 signing keys, so
// secrets never reach a gateway).
//
// Mapping (see README "S3"):
//
//   - A bucket is a top-level directory; an object key is the path below
//     it. "a/b/c" is the file /bucket/a/b/c; the directories on the way
//     are created as needed and removed again when a delete empties them.
//   - A key ending in "/" with no data is a directory (S3 "folder"
//     markers); with data it is refused (DirectoryObjectContainsData).
//   - Keys that are not paths are refused with InvalidArgument, never
//     stored under another name: empty components ("a//b"), "." or ".."
//     components, components over 255 bytes, NUL bytes, keys over 1024
//     bytes, and keys under the reserved ".braid-s3/" prefix.
//   - A key cannot be both an object and a prefix of other objects (a
//     file cannot be a directory): the second PUT gets ObjectParentIsFile
//     or ExistingObjectIsDirectory (409) and the first object is kept.
//   - Listings are in S3 order (UTF-8 bytes of the whole key): within a
//     directory a subdirectory "d" sorts as "d/".
//
// Object metadata lives in one xattr of the file, readable through a
// mount: user.s3, JSON {etag, size, mtime_ns, content_type, meta,
// upload_id} (meta: the x-amz-meta-* headers; upload_id: the multipart
// upload that made it, so that a retried completion is answered). An ETag whose size or mtime no longer match,
// because the file was changed through a mount or NFS, is replaced by one
// derived from ino, size and mtime, marked "-0" so clients do not take it
// for an MD5. Directories a PUT created carry user.s3.implicit; a bucket's
// ACL is user.s3.acl on its directory. PUTs write a hidden temporary file
// (/bucket/.braid-s3/tmp/...) and rename it over the key once the whole
// body arrived and verified: readers see the old object or the new one,
// and a client that disconnects leaves nothing visible.
//
// The reserved directory /bucket/.braid-s3/ (format 1):
//
//	tmp/<ns>-<hex>            a PUT's, part's or completion's temporary file
//	uploads/<id>/             a multipart upload in progress; xattr
//	                          user.s3.upload = JSON {key, initiated_ns,
//	                          content_type, meta}
//	uploads/<id>/NNNNN        part NNNNN (1..10000), user.s3 as an object's
//	uploads/<id>.completing.<token>  claimed by one completion (renamed
//	                          back if it fails; another completion meanwhile
//	                          gets the retryable SlowDown)
//	uploads/<id>.aborting.<token>    claimed by an abort, or a finished
//	                          completion, whose parts are being removed
//
// Upload IDs are 16 hex digits of the initiation time and 16 random ones:
// they sort in initiation order, and any other string is NoSuchUpload.
// Work a crashed gateway left (tmp files, claims) is swept by every
// gateway once older than staleAfter (sweep.go).
//
// The gateway runs as `braid s3`, or inside `braid up --s3`. Files:
// backend.go objects, buckets.go, list.go listings in S3 order,
// multipart.go, copy.go copies and batch deletes, sweep.go cleanup after
// a crashed gateway, access.go who may do what (bucket owners and ACLs,
// object modes for each user's uid), iam.go the IAM that asks the MDS
// for SigV4 signing keys and the user's identity, listen.go the
// listener. Why versitygw, why the gateway checks object modes itself,
// and why multipart completion copies: docs/DECISIONS.md.
//
// The listener bounds connections as braid's own servers do
// (internal/wire's doc says why): stalled connections, then idle ones,
// then young ones are evicted, a body crawling under 16 KiB/s counts as
// stalled, an HTTP header must arrive within 10 s, and each read or
// write of a request must move within 20 s (S3's RequestTimeout).
// versitygw only binds addresses, so the gateway binds and hands
// versitygw's fiber app its listener (reaching the app through the one
// field versitygw keeps it in, checked at start).
package s3gw
