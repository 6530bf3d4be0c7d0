package mds

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
)

func startIn(t *testing.T, dir string) *Server {
	t.Helper()
	key, err := capability.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(context.Background(), Config{Dir: dir, Listen: "127.0.0.1:0", Key: key, RepairWorkers: -1,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fileHolding reports a file under dir whose bytes contain b.
func fileHolding(t *testing.T, dir string, b []byte) string {
	t.Helper()
	found := ""
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, b) {
			found = path
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// S3 secrets were stored in plaintext in the metadata store. Now no file
// of the MDS holds one, an older store's are sealed at start, and
// signing keys still come out right.
func TestS3SecretsAreSealedAtRest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := startIn(t, dir)
	u, err := s.s3.add(ctx, mdsproto.S3UserReq{Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.s3.signingKey(ctx, mdsproto.S3SigningKeyReq{AccessKey: u.AccessKey, Date: "20261126", Region: "us-east-1", Service: "s3"})
	if err != nil {
		t.Fatal(err)
	}
	// An older MDS's record, in the clear.
	old := s3UserRec{Format: recFormat, S3User: mdsproto.S3User{Name: "bob", AccessKey: "BROLDKEY0000000000", SecretKey: "plaintext-secret-of-bob-0123456789abcdef"}}
	if err := s.kv.Update(ctx, func(tx kv.Txn) error {
		if err := tx.Put(s3AccessKey(old.AccessKey), []byte(old.Name)); err != nil {
			return err
		}
		return putRecord(tx, s3UserKey(old.Name), old)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = startIn(t, dir)
	defer s.Close()
	if f := fileHolding(t, dir, []byte(u.SecretKey)); f != "" {
		t.Errorf("%s holds alice's secret", f)
	}
	var rec s3UserRec
	if err := s.kv.View(ctx, func(r kv.Reader) error { _, err := getRecord(r, s3UserKey("bob"), &rec); return err }); err != nil {
		t.Fatal(err)
	}
	if rec.SecretKey != "" || rec.Sealed == nil {
		t.Errorf("bob's secret after a restart: clear %q, sealed %d bytes", rec.SecretKey, len(rec.Sealed))
	}
	got, err := s.s3.signingKey(ctx, mdsproto.S3SigningKeyReq{AccessKey: u.AccessKey, Date: "20261126", Region: "us-east-1", Service: "s3"})
	if err != nil || !bytes.Equal(got.Key, want.Key) {
		t.Fatalf("alice's signing key after a restart: %v", err)
	}
	bob, err := s.s3.signingKey(ctx, mdsproto.S3SigningKeyReq{AccessKey: old.AccessKey, Date: "20261126", Region: "us-east-1", Service: "s3"})
	if err != nil {
		t.Fatalf("bob's signing key from his sealed secret: %v", err)
	}
	// A user from before users had identities acts as nobody, not root.
	if bob.Uid != nobody || bob.Gid != nobody || bob.Admin || got.Uid != u.Uid || u.Uid < mdsproto.FirstS3Uid {
		t.Errorf("identities: bob (older record) %d:%d admin %v; alice %d (added as %d)", bob.Uid, bob.Gid, bob.Admin, got.Uid, u.Uid)
	}
	// A uid given by hand is skipped by the automatic ones.
	taken := u.Uid + 1
	if _, err := s.s3.add(ctx, mdsproto.S3UserReq{Name: "dave", Uid: &taken}); err != nil {
		t.Fatal(err)
	}
	carol, err := s.s3.add(ctx, mdsproto.S3UserReq{Name: "carol"})
	if err != nil || carol.Uid != u.Uid+2 || carol.Gid != carol.Uid {
		t.Errorf("the next user's identity: %d:%d after alice's %d and dave's %d, %v", carol.Uid, carol.Gid, u.Uid, taken, err)
	}
	root := uint32(0)
	if _, err := s.s3.add(ctx, mdsproto.S3UserReq{Name: "eve", Uid: &root}); err == nil {
		t.Error("an ordinary S3 user was made with uid 0")
	}
	if r, err := s.s3.add(ctx, mdsproto.S3UserReq{Name: "zoe", Uid: &root, Admin: true}); err != nil || r.Uid != 0 {
		t.Errorf("an admin acting as root: %+v %v", r, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("MDS directory mode %v, err %v; want 0700", fi.Mode().Perm(), err)
	}
}
