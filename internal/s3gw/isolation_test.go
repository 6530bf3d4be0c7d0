package s3gw_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// TestS3UsersAreIsolated: a bucket is its creator's, others reach it only
// through its ACL's grants, objects keep their writer's uid and mode, and
// a directory made outside S3 is no user's bucket.
func TestS3UsersAreIsolated(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	alice := e.s3
	bobU, err := e.cl.S3UserAdd(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	bob := client(e.srv.Addr(), bobU.AccessKey, bobU.SecretKey)
	if bobU.Uid == e.key.Uid || bobU.Uid < 200_000 || bobU.Gid != bobU.Uid {
		t.Fatalf("users' identities: alice %d:%d, bob %d:%d", e.key.Uid, e.key.Gid, bobU.Uid, bobU.Gid)
	}
	put := func(c *s3.Client, bucket, key, body string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
		return err
	}
	get := func(c *s3.Client, bucket, key string) (string, error) {
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			return "", err
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		return string(b), err
	}

	if _, err := alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alice-data")}); err != nil {
		t.Fatal(err)
	}
	if err := put(alice, "alice-data", "report.txt", "alice's report"); err != nil {
		t.Fatal(err)
	}
	dir, err := e.cl.Stat(ctx, "/alice-data")
	if err != nil || dir.Uid != e.key.Uid || dir.Gid != e.key.Gid || dir.Mode.Perm() != 0o700 {
		t.Fatalf("the bucket's directory: %+v %v", dir, err)
	}
	obj, err := e.cl.Stat(ctx, "/alice-data/report.txt")
	if err != nil || obj.Uid != e.key.Uid || obj.Gid != e.key.Gid || obj.Mode.Perm() != 0o644 {
		t.Fatalf("alice's object: %+v %v", obj, err)
	}

	// Bob, with no grant, reaches nothing of alice's.
	_, err = get(bob, "alice-data", "report.txt")
	wantCode(t, "bob reads alice's object", err, "AccessDenied")
	wantCode(t, "bob writes in alice's bucket", put(bob, "alice-data", "bob.txt", "x"), "AccessDenied")
	_, err = bob.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("alice-data"), Key: aws.String("report.txt")})
	wantCode(t, "bob deletes alice's object", err, "AccessDenied")
	_, err = bob.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("alice-data")})
	wantCode(t, "bob lists alice's bucket", err, "AccessDenied")
	_, err = bob.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("alice-data")})
	wantCode(t, "bob reads alice's ACL", err, "AccessDenied")
	_, err = bob.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("alice-data"), ACL: types.BucketCannedACLPublicRead})
	wantCode(t, "bob opens alice's bucket", err, "AccessDenied")
	_, err = bob.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("alice-data")})
	wantCode(t, "bob deletes alice's bucket", err, "AccessDenied")
	_, err = bob.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alice-data")})
	wantCode(t, "bob creates alice's bucket again", err, "BucketAlreadyExists")
	_, err = alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("alice-data")})
	wantCode(t, "alice creates her bucket again", err, "BucketAlreadyOwnedByYou")
	if _, err := bob.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bob-data")}); err != nil {
		t.Fatal(err)
	}
	if names := bucketNames(t, bob); strings.Join(names, ",") != "bob-data" {
		t.Fatalf("bob's ListBuckets: %v", names)
	}
	if names := bucketNames(t, alice); strings.Join(names, ",") != "alice-data" {
		t.Fatalf("alice's ListBuckets: %v", names)
	}
	if got, err := get(alice, "alice-data", "report.txt"); err != nil || got != "alice's report" {
		t.Fatalf("alice's object after bob's tries: %q %v", got, err)
	}

	// GetBucketAcl tells who may do what; a READ grant lets bob list and
	// read, not write.
	acl, err := alice.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("alice-data")})
	if err != nil || aws.ToString(acl.Owner.ID) != e.key.AccessKey || grantsOf(acl) != e.key.AccessKey+":FULL_CONTROL" {
		t.Fatalf("alice's ACL: owner %s, grants %s, %v", aws.ToString(acl.Owner.ID), grantsOf(acl), err)
	}
	if _, err := alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("alice-data"),
		GrantRead: aws.String(bobU.AccessKey)}); err != nil {
		t.Fatal(err)
	}
	acl, err = alice.GetBucketAcl(ctx, &s3.GetBucketAclInput{Bucket: aws.String("alice-data")})
	if want := e.key.AccessKey + ":FULL_CONTROL " + bobU.AccessKey + ":READ"; err != nil || grantsOf(acl) != want {
		t.Fatalf("ACL after the grant: %s, want %s, %v", grantsOf(acl), want, err)
	}
	if got, err := get(bob, "alice-data", "report.txt"); err != nil || got != "alice's report" {
		t.Fatalf("bob reads with a READ grant: %q %v", got, err)
	}
	if _, err := bob.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("alice-data")}); err != nil {
		t.Fatalf("bob lists with a READ grant: %v", err)
	}
	wantCode(t, "bob writes with a READ grant", put(bob, "alice-data", "bob.txt", "x"), "AccessDenied")

	// Objects follow their modes: a file alice made private is hers
	// alone, whatever the bucket grants; one root made through a mount is
	// root's.
	if _, err := e.cl.SetAttr(ctx, braid.SetAttrRequest{Ino: obj.Ino, Mode: aws.Uint32(0o600)}); err != nil {
		t.Fatal(err)
	}
	_, err = get(bob, "alice-data", "report.txt")
	wantCode(t, "bob reads alice's 0600 object", err, "AccessDenied")
	_, err = bob.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("alice-data"), Key: aws.String("report.txt")})
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("bob HEADs alice's 0600 object: %v", err)
	}
	_, err = bob.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("bob-data"), Key: aws.String("stolen"), CopySource: aws.String("alice-data/report.txt")})
	wantCode(t, "bob copies alice's 0600 object", err, "AccessDenied")
	up, err := bob.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bob-data"), Key: aws.String("parts")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("bob-data"), Key: aws.String("parts"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), CopySource: aws.String("alice-data/report.txt")})
	wantCode(t, "bob copies a part of alice's 0600 object", err, "AccessDenied")
	if got, err := get(alice, "alice-data", "report.txt"); err != nil || got != "alice's report" {
		t.Fatalf("alice reads her 0600 object: %q %v", got, err)
	}
	testcluster.WriteFile(t, e.cl, "/alice-data/root-only.txt", braid.CreateOptions{Mode: 0o600}, []byte("root's"))
	_, err = get(alice, "alice-data", "root-only.txt")
	wantCode(t, "alice reads root's 0600 file in her bucket", err, "AccessDenied")

	// With WRITE, bob puts his own objects (his uid) and deletes keys, but
	// may not overwrite an object that is not writable to him.
	if _, err := alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("alice-data"),
		GrantRead:  aws.String(bobU.AccessKey),
		GrantWrite: aws.String(bobU.AccessKey)}); err != nil {
		t.Fatal(err)
	}
	if err := put(bob, "alice-data", "bob.txt", "bob's"); err != nil {
		t.Fatalf("bob writes with a WRITE grant: %v", err)
	}
	if fi, err := e.cl.Stat(ctx, "/alice-data/bob.txt"); err != nil || fi.Uid != bobU.Uid || fi.Gid != bobU.Gid {
		t.Fatalf("bob's object: %+v %v", fi, err)
	}
	wantCode(t, "bob overwrites alice's object", put(bob, "alice-data", "report.txt", "overwritten"), "AccessDenied")
	_, err = bob.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("alice-data")})
	wantCode(t, "bob, with WRITE, deletes alice's bucket", err, "AccessDenied")
	if got, err := get(alice, "alice-data", "report.txt"); err != nil || got != "alice's report" {
		t.Fatalf("alice's object after bob's overwrite: %q %v", got, err)
	}
	if err := put(alice, "alice-data", "report.txt", "alice's second report"); err != nil {
		t.Fatalf("alice overwrites her own object: %v", err)
	}
	if got, err := get(bob, "alice-data", "report.txt"); err != nil || got != "alice's second report" {
		t.Fatalf("bob reads alice's new 0644 object: %q %v", got, err)
	}
	_, err = bob.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("alice-data"), Key: aws.String("report.txt"),
		CopySource: aws.String("alice-data/report.txt"), MetadataDirective: types.MetadataDirectiveReplace, Metadata: map[string]string{"by": "bob"}})
	wantCode(t, "bob, who may read it, replaces the metadata of alice's object", err, "AccessDenied")

	// A top-level directory made outside S3 is no user's bucket.
	if err := e.cl.Mkdir(ctx, "/private", false); err != nil {
		t.Fatal(err)
	}
	testcluster.WriteFile(t, e.cl, "/private/secret.txt", braid.CreateOptions{Mode: 0o600}, []byte("root's secret"))
	_, err = get(alice, "private", "secret.txt")
	wantCode(t, "alice reads a directory made through a mount", err, "AccessDenied")
	_, err = alice.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("private")})
	wantCode(t, "alice lists a directory made through a mount", err, "AccessDenied")
	wantCode(t, "alice writes into a directory made through a mount", put(alice, "private", "x", "x"), "AccessDenied")

	// A user in the object's group reads what the group may.
	g := e.key.Gid
	carolU, err := e.cl.S3UserCreate(ctx, braid.S3UserSpec{Name: "carol", Groups: []uint32{g}})
	if err != nil {
		t.Fatal(err)
	}
	carol := client(e.srv.Addr(), carolU.AccessKey, carolU.SecretKey)
	if _, err := alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: aws.String("alice-data"),
		GrantRead: aws.String(bobU.AccessKey + "," + carolU.AccessKey)}); err != nil {
		t.Fatal(err)
	}
	second, err := e.cl.Stat(ctx, "/alice-data/report.txt") // a new file: the PUT replaced it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.cl.SetAttr(ctx, braid.SetAttrRequest{Ino: second.Ino, Mode: aws.Uint32(0o640)}); err != nil {
		t.Fatal(err)
	}
	if got, err := get(carol, "alice-data", "report.txt"); err != nil || got != "alice's second report" {
		t.Fatalf("carol, in alice's group, reads a 0640 object: %q %v", got, err)
	}
	_, err = get(bob, "alice-data", "report.txt")
	wantCode(t, "bob, not in alice's group, reads a 0640 object", err, "AccessDenied")

	// An admin reaches every bucket, as root.
	zoe, err := e.cl.S3UserCreate(ctx, braid.S3UserSpec{Name: "zoe", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	admin := client(e.srv.Addr(), zoe.AccessKey, zoe.SecretKey)
	if got, err := get(admin, "private", "secret.txt"); err != nil || got != "root's secret" {
		t.Fatalf("an admin reads a directory made through a mount: %q %v", got, err)
	}
	if names := bucketNames(t, admin); strings.Join(names, ",") != "alice-data,bob-data,private" {
		t.Fatalf("an admin's ListBuckets: %v", names)
	}
}

func bucketNames(t *testing.T, c *s3.Client) []string {
	t.Helper()
	out, err := c.ListBuckets(context.Background(), &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range out.Buckets {
		names = append(names, aws.ToString(b.Name))
	}
	return names
}

// grantsOf is an ACL's grants as "grantee:PERMISSION ...".
func grantsOf(acl *s3.GetBucketAclOutput) string {
	if acl == nil {
		return ""
	}
	var out []string
	for _, g := range acl.Grants {
		who := aws.ToString(g.Grantee.ID)
		if who == "" {
			who = aws.ToString(g.Grantee.URI)
		}
		out = append(out, who+":"+string(g.Permission))
	}
	return strings.Join(out, " ")
}

// TestSealedBucket: objects of a bucket whose layout seals them read back
// whole, in ranges and copied, with their plaintext sizes and MD5s.
func TestSealedBucket(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("vault")}); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.SetLayout(ctx, "/vault", "ec:4+2,unit=64KiB,enc=aes-gcm"); err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("sealed object body, ", 60_000)) // 1.2 MB
	put, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("vault"), Key: aws.String("a/obj"), Body: strings.NewReader(string(body))})
	if err != nil || aws.ToString(put.ETag) != md5hex(body) {
		t.Fatalf("PUT: %v, ETag %s", err, aws.ToString(put.ETag))
	}
	fi, err := e.cl.Stat(ctx, "/vault/a/obj")
	if err != nil || !strings.Contains(fi.Layout.Spec, "enc=aes-gcm") || fi.Size != int64(len(body)) {
		t.Fatalf("the object's file: %+v %v", fi, err)
	}
	out, err := e.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("vault"), Key: aws.String("a/obj"), Range: aws.String("bytes=4090-9000")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(got) != string(body[4090:9001]) {
		t.Fatalf("ranged GET across blocks: %d bytes, equal %v", len(got), string(got) == string(body[4090:9001]))
	}
	if _, err := e.s3.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("vault"), Key: aws.String("copy"), CopySource: aws.String("vault/a/obj")}); err != nil {
		t.Fatal(err)
	}
	head, err := e.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("vault"), Key: aws.String("copy")})
	if err != nil || aws.ToInt64(head.ContentLength) != int64(len(body)) || aws.ToString(head.ETag) != md5hex(body) {
		t.Fatalf("HEAD of the copy: %v", err)
	}
}
