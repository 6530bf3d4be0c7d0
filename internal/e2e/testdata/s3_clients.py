"""Every S3 operation braid serves, through boto3, against `braid up --s3`.

Run by TestS3RealClients (s3_test.go) with S3_ENDPOINT, S3_ACCESS_KEY,
S3_SECRET_KEY and MOUNT_OBJECT ("bucket/key:sha256" of a file the test
wrote through the FUSE mount). Exits non-zero on the first failed check,
printing it. Writes py-bucket/layout.bin with x-amz-meta-braid-layout
mirror:3 and shared/from-s3.txt for the Go side to check.
"""

import datetime
import hashlib
import os
import sys
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

EP = os.environ["S3_ENDPOINT"]
ACCESS, SECRET = os.environ["S3_ACCESS_KEY"], os.environ["S3_SECRET_KEY"]
MIB = 1 << 20


def client(secret=SECRET):
    return boto3.client(
        "s3",
        endpoint_url=EP,
        aws_access_key_id=ACCESS,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


s3 = client()


def check(cond, what):
    if not cond:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)
    print("ok:", what)


def error_code(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def expect_error(code, what, fn, *args, **kw):
    got = error_code(fn, *args, **kw)
    check(got == code, f"{what}: error {got}, want {code}")


def md5(b):
    return '"' + hashlib.md5(b).hexdigest() + '"'


def body(n, seed):
    return hashlib.sha256(seed.encode()).digest() * (n // 32) + b"x" * (n % 32)


B = "py-bucket"

# Buckets.
s3.create_bucket(Bucket=B)
s3.head_bucket(Bucket=B)
check(B in [b["Name"] for b in s3.list_buckets()["Buckets"]], "ListBuckets shows the new bucket")
loc = s3.get_bucket_location(Bucket=B)
check(loc.get("LocationConstraint") in (None, "", "us-east-1"), f"GetBucketLocation {loc.get('LocationConstraint')!r}")
expect_error("BucketAlreadyOwnedByYou", "CreateBucket twice", s3.create_bucket, Bucket=B)
expect_error("404", "HeadBucket of a missing bucket", s3.head_bucket, Bucket="no-such-bucket")
expect_error("NoSuchBucket", "GET in a missing bucket", s3.get_object, Bucket="no-such-bucket", Key="k")

# Objects: PUT, GET (ranges and conditions), HEAD, metadata, ETag.
data = body(300_000, "obj")
put = s3.put_object(Bucket=B, Key="dir/obj.bin", Body=data, ContentType="application/x-test", Metadata={"color": "blue"})
check(put["ETag"] == md5(data), "PutObject ETag is the MD5")
got = s3.get_object(Bucket=B, Key="dir/obj.bin")
check(got["Body"].read() == data, "GetObject returns the bytes")
check(got["ContentType"] == "application/x-test" and got["Metadata"] == {"color": "blue"}, "Content-Type and x-amz-meta-* kept")
head = s3.head_object(Bucket=B, Key="dir/obj.bin")
check(head["ContentLength"] == len(data) and head["ETag"] == put["ETag"], "HeadObject")
r = s3.get_object(Bucket=B, Key="dir/obj.bin", Range="bytes=1000-1999")
check(r["Body"].read() == data[1000:2000] and r["ContentRange"] == f"bytes 1000-1999/{len(data)}", "ranged GET")
r = s3.get_object(Bucket=B, Key="dir/obj.bin", Range="bytes=-100")
check(r["Body"].read() == data[-100:], "suffix range GET")
expect_error("InvalidRange", "range past the end", s3.get_object, Bucket=B, Key="dir/obj.bin", Range=f"bytes={len(data)}-")
check(s3.get_object(Bucket=B, Key="dir/obj.bin", IfMatch=put["ETag"])["Body"].read() == data, "If-Match of the ETag")
expect_error("PreconditionFailed", "If-Match of another ETag", s3.get_object, Bucket=B, Key="dir/obj.bin", IfMatch='"abc"')
expect_error("304", "If-None-Match of the ETag", s3.get_object, Bucket=B, Key="dir/obj.bin", IfNoneMatch=put["ETag"])
yesterday = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)
check(s3.get_object(Bucket=B, Key="dir/obj.bin", IfModifiedSince=yesterday)["Body"].read() == data, "If-Modified-Since before the write")
expect_error("PreconditionFailed", "If-Unmodified-Since before the write", s3.get_object, Bucket=B, Key="dir/obj.bin", IfUnmodifiedSince=yesterday)
expect_error("NoSuchKey", "GET of a missing key", s3.get_object, Bucket=B, Key="dir/missing")
expect_error("InvalidArgument", "a key that is no path (a//b)", s3.put_object, Bucket=B, Key="a//b", Body=b"x")
expect_error("ObjectParentIsFile", "a key below an object", s3.put_object, Bucket=B, Key="dir/obj.bin/child", Body=b"x")

# A per-object layout, chosen by header.
s3.put_object(Bucket=B, Key="layout.bin", Body=body(100_000, "layout"), Metadata={"braid-layout": "mirror:3"})

# Listing: prefix, delimiter, pages, start-after, V1 markers.
keys = [f"list/{c}/{i}" for c in "ab" for i in range(3)] + ["list/top"]
for k in keys:
    s3.put_object(Bucket=B, Key=k, Body=k.encode())
seen, token = [], None
for _ in range(10):
    kw = {"ContinuationToken": token} if token else {}
    page = s3.list_objects_v2(Bucket=B, Prefix="list/", MaxKeys=3, **kw)
    seen += [o["Key"] for o in page.get("Contents", [])]
    if not page["IsTruncated"]:
        break
    token = page["NextContinuationToken"]
check(seen == sorted(keys), f"ListObjectsV2 pages in key order: {seen}")
page = s3.list_objects_v2(Bucket=B, Prefix="list/", Delimiter="/")
check([p["Prefix"] for p in page["CommonPrefixes"]] == ["list/a/", "list/b/"] and [o["Key"] for o in page["Contents"]] == ["list/top"],
      "ListObjectsV2 with a delimiter")
page = s3.list_objects_v2(Bucket=B, Prefix="list/", StartAfter="list/b/0")
check([o["Key"] for o in page["Contents"]] == ["list/b/1", "list/b/2", "list/top"], "ListObjectsV2 StartAfter")
page = s3.list_objects(Bucket=B, Prefix="list/", Marker="list/a/2", MaxKeys=2)
check([o["Key"] for o in page["Contents"]] == ["list/b/0", "list/b/1"] and page["IsTruncated"], "ListObjects (V1) Marker and MaxKeys")
check(all(o["ETag"] == md5(o["Key"].encode()) for o in s3.list_objects_v2(Bucket=B, Prefix="list/")["Contents"]), "listed ETags")

# Copies.
c = s3.copy_object(Bucket=B, Key="copy.bin", CopySource={"Bucket": B, "Key": "dir/obj.bin"})
check(c["CopyObjectResult"]["ETag"] == md5(data), "CopyObject ETag")
check(s3.get_object(Bucket=B, Key="copy.bin")["Metadata"] == {"color": "blue"}, "CopyObject keeps metadata")
s3.copy_object(Bucket=B, Key="copy.bin", CopySource={"Bucket": B, "Key": "copy.bin"}, MetadataDirective="REPLACE", Metadata={"color": "red"})
check(s3.head_object(Bucket=B, Key="copy.bin")["Metadata"] == {"color": "red"}, "CopyObject onto itself replaces metadata")

# Multipart: 5 MiB parts, listing, ranged part copy, completion, abort.
K = "multi/part.bin"
p1, p2 = body(5 * MIB, "p1"), body(5 * MIB, "p2")
up = s3.create_multipart_upload(Bucket=B, Key=K, ContentType="application/x-multi", Metadata={"kind": "mp"})
uid = up["UploadId"]
e1 = s3.upload_part(Bucket=B, Key=K, UploadId=uid, PartNumber=1, Body=p1)["ETag"]
e2 = s3.upload_part(Bucket=B, Key=K, UploadId=uid, PartNumber=2, Body=p2)["ETag"]
e3 = s3.upload_part_copy(Bucket=B, Key=K, UploadId=uid, PartNumber=3, CopySource={"Bucket": B, "Key": "dir/obj.bin"},
                         CopySourceRange="bytes=0-9999")["CopyPartResult"]["ETag"]
check([e1, e2, e3] == [md5(p1), md5(p2), md5(data[:10000])], "part ETags are MD5s (UploadPartCopy of a range too)")
parts = s3.list_parts(Bucket=B, Key=K, UploadId=uid)["Parts"]
check([(p["PartNumber"], p["Size"]) for p in parts] == [(1, 5 * MIB), (2, 5 * MIB), (3, 10000)], "ListParts")
ups = s3.list_multipart_uploads(Bucket=B).get("Uploads", [])
check([(u["Key"], u["UploadId"]) for u in ups] == [(K, uid)], "ListMultipartUploads")
expect_error("NoSuchKey", "the object is invisible before completion", s3.get_object, Bucket=B, Key=K)
expect_error("InvalidPart", "completion with a wrong ETag", s3.complete_multipart_upload, Bucket=B, Key=K, UploadId=uid,
             MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e2}]})
done = s3.complete_multipart_upload(Bucket=B, Key=K, UploadId=uid, MultipartUpload={"Parts": [
    {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}, {"PartNumber": 3, "ETag": e3}]})
want_etag = '"' + hashlib.md5(b"".join(bytes.fromhex(e.strip('"')) for e in (e1, e2, e3))).hexdigest() + '-3"'
check(done["ETag"] == want_etag, f"multipart ETag {done['ETag']}, want {want_etag}")
got = s3.get_object(Bucket=B, Key=K)
check(got["Body"].read() == p1 + p2 + data[:10000] and got["ContentType"] == "application/x-multi" and got["Metadata"] == {"kind": "mp"},
      "the completed object")
check(s3.list_multipart_uploads(Bucket=B).get("Uploads", []) == [], "no uploads left")
small = s3.create_multipart_upload(Bucket=B, Key="small")["UploadId"]
s1 = s3.upload_part(Bucket=B, Key="small", UploadId=small, PartNumber=1, Body=b"tiny")["ETag"]
s2 = s3.upload_part(Bucket=B, Key="small", UploadId=small, PartNumber=2, Body=b"tiny")["ETag"]
expect_error("EntityTooSmall", "a small part before the last", s3.complete_multipart_upload, Bucket=B, Key="small", UploadId=small,
             MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": s1}, {"PartNumber": 2, "ETag": s2}]})
s3.abort_multipart_upload(Bucket=B, Key="small", UploadId=small)
expect_error("NoSuchUpload", "ListParts after abort", s3.list_parts, Bucket=B, Key="small", UploadId=small)

# Presigned URLs (query-string SigV4).
url = s3.generate_presigned_url("put_object", Params={"Bucket": B, "Key": "presigned.txt"}, ExpiresIn=300)
try:
    urllib.request.urlopen(urllib.request.Request(url, data=b"presigned body", method="PUT")).read()
except urllib.error.HTTPError as e:
    check(False, f"presigned PUT: {e.code} {e.read()}")
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "presigned.txt"}, ExpiresIn=300)
check(urllib.request.urlopen(url).read() == b"presigned body", "presigned PUT then GET")
try:
    urllib.request.urlopen(url.replace("X-Amz-Signature=", "X-Amz-Signature=00"))
    check(False, "a presigned URL with an altered signature was accepted")
except urllib.error.HTTPError as e:
    check(e.code == 403 and b"SignatureDoesNotMatch" in e.read(), "altered presigned URL refused")
expect_error("SignatureDoesNotMatch", "a request signed with the wrong secret", client("wrong").get_object, Bucket=B, Key="copy.bin")
try:
    urllib.request.urlopen(EP + "/" + B + "/copy.bin")
    check(False, "an anonymous GET of a private bucket was served")
except urllib.error.HTTPError as e:
    check(e.code == 403, "anonymous GET of a private bucket refused")

# The file written through the FUSE mount is an object; an object is a file.
mb, rest = os.environ["MOUNT_OBJECT"].split("/", 1)
mkey, msum = rest.split(":")
check(hashlib.sha256(s3.get_object(Bucket=mb, Key=mkey)["Body"].read()).hexdigest() == msum, "a file written through the mount, read through S3")
# Its mtime was set to 2020 through the mount.
expect_error("304", "If-Modified-Since after the mtime", s3.get_object, Bucket=mb, Key=mkey,
             IfModifiedSince=datetime.datetime(2021, 1, 1, tzinfo=datetime.timezone.utc))
s3.put_object(Bucket=mb, Key="from-s3.txt", Body=b"written through S3\n")

# Deletes.
expect_error("BucketNotEmpty", "DeleteBucket of a bucket with keys", s3.delete_bucket, Bucket=B)
s3.delete_object(Bucket=B, Key="copy.bin")
s3.delete_object(Bucket=B, Key="copy.bin")  # deleting a missing key succeeds
expect_error("NoSuchKey", "GET after DeleteObject", s3.get_object, Bucket=B, Key="copy.bin")
left = [o["Key"] for o in s3.list_objects_v2(Bucket=B)["Contents"] if o["Key"] != "layout.bin"]
res = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": k} for k in left]})
check(sorted(d["Key"] for d in res["Deleted"]) == sorted(left) and not res.get("Errors"), "DeleteObjects")
check([o["Key"] for o in s3.list_objects_v2(Bucket=B)["Contents"]] == ["layout.bin"], "only layout.bin left")
print("all S3 checks passed")
