package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braidfs/braid/internal/testcluster"
)

// TestS3RealClients runs boto3 (testdata/s3_clients.py: every operation
// the gateway serves) and the AWS CLI against `braid up --s3 --mount`, and
// checks that files and objects are the same things.
func TestS3RealClients(t *testing.T) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	mnt := t.TempDir()
	cluster := filepath.Join(t.TempDir(), "cluster")
	startUp(t, e, cluster, "--s3", "127.0.0.1:0", "--mount", mnt)
	var st struct {
		S3 string `json:"s3"`
	}
	testcluster.Eventually(t, 30*time.Second, func() bool {
		b, err := os.ReadFile(filepath.Join(e.state, "braid", "cluster.json"))
		return err == nil && json.Unmarshal(b, &st) == nil && st.S3 != "" && isMounted(mnt)
	}, func() string { return "braid up --s3 --mount: no gateway address in the state file, or no mount" })
	var key struct {
		Access string `json:"access_key"`
		Secret string `json:"secret_key"`
	}
	// tester is an admin: it reaches "shared", a directory made through the
	// mount, which is no ordinary user's bucket.
	if err := json.Unmarshal([]byte(e.must("s3", "user", "add", "tester", "--admin", "--json")), &key); err != nil || key.Access == "" || key.Secret == "" {
		t.Fatalf("braid s3 user add --json: %+v %v", key, err)
	}
	if out := e.must("s3", "user", "list"); !strings.Contains(out, "tester") || !strings.Contains(out, key.Access) || strings.Contains(out, key.Secret) {
		t.Fatalf("braid s3 user list: %q", out)
	}

	// A bucket and an object made through the mount.
	fromMount := bytes.Repeat([]byte("written through the mount\n"), 100_000)
	if err := os.MkdirAll(filepath.Join(mnt, "shared", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "shared", "sub", "m.bin"), fromMount, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(fromMount)
	y2020 := time.Date(2020, 6, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(mnt, "shared", "sub", "m.bin"), y2020, y2020); err != nil {
		t.Fatal(err)
	}

	env := append(os.Environ(), "S3_ENDPOINT=http://"+st.S3, "S3_ACCESS_KEY="+key.Access, "S3_SECRET_KEY="+key.Secret,
		"MOUNT_OBJECT=shared/sub/m.bin:"+hex.EncodeToString(sum[:]),
		"AWS_ACCESS_KEY_ID="+key.Access, "AWS_SECRET_ACCESS_KEY="+key.Secret, "AWS_DEFAULT_REGION=us-east-1",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	py := exec.Command("python3", "testdata/s3_clients.py")
	py.Env = env
	out, err := py.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "all S3 checks passed") {
		t.Fatalf("boto3 checks: %v\n%s", err, out)
	}
	t.Logf("boto3: %d checks passed", strings.Count(string(out), "\nok: ")+1)
	if got, err := os.ReadFile(filepath.Join(mnt, "shared", "from-s3.txt")); err != nil || string(got) != "written through S3\n" {
		t.Fatalf("an object written through S3, read through the mount: %q %v", got, err)
	}
	if stat := e.must("stat", "/py-bucket/layout.bin"); !strings.Contains(stat, "mirror:3") {
		t.Fatalf("x-amz-meta-braid-layout mirror:3 not applied:\n%s", stat)
	}

	// The AWS CLI: a 20 MiB cp is a multipart upload of 8 MiB parts.
	aws := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("aws", append([]string{"--endpoint-url", "http://" + st.S3}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(cluster, "logs", "s3.log"))
			t.Fatalf("aws %s: %v\n%s\nthe gateway's log:\n%s", strings.Join(args, " "), err, out, log)
		}
		return string(out)
	}
	local := filepath.Join(t.TempDir(), "big")
	big := bytes.Repeat([]byte("0123456789abcdef"), 20<<16) // 20 MiB
	if err := os.WriteFile(local, big, 0o644); err != nil {
		t.Fatal(err)
	}
	e.must("layout", "set", "/shared", "mirror:2") // the bucket's default, as a directory's
	aws("s3", "cp", local, "s3://shared/cli/big.bin")
	if stat := e.must("stat", "/shared/cli/big.bin"); !strings.Contains(stat, "mirror:2") {
		t.Fatalf("the bucket's default layout not applied to a multipart object:\n%s", stat)
	}
	back := filepath.Join(t.TempDir(), "back")
	aws("s3", "cp", "s3://shared/cli/big.bin", back)
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("aws s3 cp round trip: %d bytes, %v", len(got), err)
	}
	head := aws("s3api", "head-object", "--bucket", "shared", "--key", "cli/big.bin")
	if !strings.Contains(head, `-3\"`) {
		t.Fatalf("the CLI's upload is not a 3-part multipart object:\n%s", head)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "shared", "cli", "big.bin")); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("the CLI's multipart object through the mount: %d bytes, %v", len(got), err)
	}
	if ls := aws("s3", "ls", "--recursive", "s3://shared/"); !strings.Contains(ls, "cli/big.bin") || !strings.Contains(ls, "sub/m.bin") {
		t.Fatalf("aws s3 ls --recursive:\n%s", ls)
	}
	aws("s3", "rm", "s3://py-bucket/layout.bin")
	aws("s3", "rb", "s3://py-bucket")
	if ls := aws("s3", "ls"); strings.Contains(ls, "py-bucket") || !strings.Contains(ls, "shared") {
		t.Fatalf("aws s3 ls after rb:\n%s", ls)
	}
	if _, err := os.Stat(filepath.Join(mnt, "py-bucket")); !os.IsNotExist(err) {
		t.Fatalf("the removed bucket through the mount: %v", err)
	}

	// An ordinary user, with the uid it was given, reaches its own bucket
	// only; what it writes is its uid's.
	var guest struct {
		Access string `json:"access_key"`
		Secret string `json:"secret_key"`
		Uid    uint32 `json:"uid"`
	}
	if err := json.Unmarshal([]byte(e.must("s3", "user", "add", "guest", "--uid", "5000", "--gid", "5001", "--json")), &guest); err != nil || guest.Uid != 5000 {
		t.Fatalf("braid s3 user add guest --uid 5000: %+v %v", guest, err)
	}
	if out := e.must("s3", "user", "list"); !strings.Contains(out, "5000") || !strings.Contains(out, "admin") {
		t.Fatalf("braid s3 user list shows no uid or role:\n%s", out)
	}
	asGuest := func(args ...string) (string, error) {
		cmd := exec.Command("aws", append([]string{"--endpoint-url", "http://" + st.S3}, args...)...)
		cmd.Env = append(env, "AWS_ACCESS_KEY_ID="+guest.Access, "AWS_SECRET_ACCESS_KEY="+guest.Secret)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := asGuest("s3", "ls", "s3://shared/"); err == nil || !strings.Contains(out, "AccessDenied") {
		t.Fatalf("guest lists the mount's directory: %v\n%s", err, out)
	}
	if out, err := asGuest("s3", "cp", "s3://shared/sub/m.bin", filepath.Join(t.TempDir(), "m")); err == nil || !strings.Contains(out, "403") {
		t.Fatalf("guest reads the mount's file: %v\n%s", err, out)
	}
	if out, err := asGuest("s3", "mb", "s3://guest-bucket"); err != nil {
		t.Fatalf("guest makes a bucket: %v\n%s", err, out)
	}
	if out, err := asGuest("s3", "cp", local, "s3://guest-bucket/big.bin"); err != nil {
		t.Fatalf("guest writes to its bucket: %v\n%s", err, out)
	}
	if out, err := asGuest("s3", "ls"); err != nil || !strings.Contains(out, "guest-bucket") || strings.Contains(out, "shared") {
		t.Fatalf("guest's bucket list: %v\n%s", err, out)
	}
	var fst unix.Stat_t
	if err := unix.Stat(filepath.Join(mnt, "guest-bucket", "big.bin"), &fst); err != nil || fst.Uid != 5000 || fst.Gid != 5001 || fst.Size != int64(len(big)) {
		t.Fatalf("guest's object through the mount: uid %d gid %d size %d, %v", fst.Uid, fst.Gid, fst.Size, err)
	}
}

func isMounted(dir string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	return strings.Contains(string(b), " "+dir+" ")
}
