package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/testcluster"
)

// freeAddrs asks the OS for n free loopback addresses.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out
}

// copyFile copies one file, keeping its mode.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// TestMDSFailoverOnEtcd: three MDS processes, each running a member of one
// etcd cluster (--meta-peers), are one active and two standbys. Clients
// and OSDs name all three. The active is SIGKILLed while a client
// creates files: a standby takes over within seconds, every create that
// was acknowledged is there, and the files written before read back.
func TestMDSFailoverOnEtcd(t *testing.T) {
	bin := Binary(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "cluster.key")
	if err := capability.CreateKeyFile(key); err != nil {
		t.Fatal(err)
	}
	// One MDS start makes the CA and the keys every MDS must share.
	c := &Cluster{t: t, Dir: dir, bin: bin, key: key, caDir: filepath.Join(dir, "a", "auth")}
	boot := c.start("boot", "mds", "--dir", filepath.Join(dir, "a"), "--listen", "127.0.0.1:0", "--key-file", key)
	_ = boot.cmd.Process.Signal(syscall.SIGTERM)
	<-boot.done
	if err := os.RemoveAll(filepath.Join(dir, "a", "meta")); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"b", "c"} {
		for _, f := range []string{"auth/ca.pem", "auth/ca.key", "auth/mds.cred", "auth/admin.cred", "filekeys.key", "s3secrets.key"} {
			copyFile(t, filepath.Join(dir, "a", f), filepath.Join(dir, m, f))
		}
	}

	names := []string{"a", "b", "c"}
	addrs := freeAddrs(t, 9) // per member: MDS, etcd client, etcd peer
	var peers []string
	for i, n := range names {
		peers = append(peers, n+"=http://"+addrs[3*i+2])
	}
	mdsList := strings.Join([]string{addrs[0], addrs[3], addrs[6]}, ",")
	procs := map[string]*exec.Cmd{}
	done := map[string]chan struct{}{}
	for i, n := range names {
		logf, err := os.Create(filepath.Join(dir, n+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "mds", "--dir", filepath.Join(dir, n), "--listen", addrs[3*i], "--key-file", key,
			"--default-layout", "mirror:2", "--osd-down-after", "2s", "--meta-peers", strings.Join(peers, ","), "--meta-name", n,
			"--meta-client-url", "http://"+addrs[3*i+1], "--meta-lease", "4s")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		procs[n], done[n] = cmd, make(chan struct{})
		go func(cmd *exec.Cmd, d chan struct{}) { _ = cmd.Wait(); close(d) }(cmd, done[n])
	}
	t.Cleanup(func() {
		for n, cmd := range procs {
			select {
			case <-done[n]:
			default:
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-done[n]
			}
		}
	})
	logs := func() string {
		var b strings.Builder
		for _, n := range names {
			l, _ := os.ReadFile(filepath.Join(dir, n+".log"))
			fmt.Fprintf(&b, "--- %s ---\n%s", n, l)
		}
		return b.String()
	}
	leader := func() string {
		for _, n := range names {
			select {
			case <-done[n]:
				continue
			default:
			}
			if l, _ := os.ReadFile(filepath.Join(dir, n+".log")); strings.Contains(string(l), "mds serving") {
				return n
			}
		}
		return ""
	}
	testcluster.Eventually(t, 60*time.Second, func() bool { return leader() != "" }, func() string { return "no MDS leads:\n" + logs() })

	c.MDS = &Proc{Addr: mdsList}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("osd%d", i)
		c.OSDs = append(c.OSDs, c.start(name, "osd", "--dir", filepath.Join(dir, name), "--listen", "127.0.0.1:0",
			"--mds-addr", mdsList, "--key-file", key, "--heartbeat", "200ms", "--cred", c.Cred(name, auth.RoleOSD)))
	}
	t.Cleanup(func() {
		for _, p := range c.OSDs {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	})
	admin, err := braid.LoadCredential(filepath.Join(dir, "a", "auth", "admin.cred"))
	if err != nil {
		t.Fatal(err)
	}
	opts := braid.DefaultOptions
	opts.Credential = admin
	ctx := context.Background()
	var cl *braid.Client
	testcluster.Eventually(t, 30*time.Second, func() bool {
		var err error
		if cl == nil {
			if cl, err = braid.DialOptions(ctx, mdsList, opts); err != nil {
				return false
			}
		}
		st, err := cl.Status(ctx)
		return err == nil && st.UpOSDs() == 3
	}, func() string { return "OSDs not up:\n" + logs() })
	defer cl.Close()
	data := bytesOf(7, 3<<20)
	createFile(t, cl, "/before", "", data)

	// A client creates files, one after another, across the kill.
	var mu sync.Mutex
	var acked []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p := fmt.Sprintf("/during-%d", i)
			err := cl.Mkdir(ctx, p, false)
			if errors.Is(err, braid.ErrExists) {
				// A retry across the failover answered as a new request:
				// exactly-once did not hold.
				t.Errorf("mkdir %s: %v", p, err)
			}
			if err == nil {
				mu.Lock()
				acked = append(acked, p)
				mu.Unlock()
			}
		}
	}()
	testcluster.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 20
	}, func() string { return "creates did not start" })
	old := leader()
	killed := time.Now()
	_ = procs[old].Process.Signal(syscall.SIGKILL)
	<-done[old]
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	testcluster.Eventually(t, 90*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) > before+5
	}, func() string { return "creates did not resume after the active MDS died:\n" + logs() })
	resumed := time.Since(killed)
	close(stop)
	wg.Wait()
	t.Logf("MDS %s killed; %s leads; creates resumed after %v (%d acknowledged in all)", old, leader(), resumed.Round(10*time.Millisecond), len(acked))
	for _, p := range acked {
		if fi, err := cl.Stat(ctx, p); err != nil || !fi.IsDir {
			t.Fatalf("%s was acknowledged and is gone after the failover: %v", p, err)
		}
	}
	mustReadE2E(t, cl, "/before", data)
	createFile(t, cl, "/after", "", data)
	mustReadE2E(t, cl, "/after", data)
}

func mustReadE2E(t *testing.T, cl *braid.Client, p string, want []byte) {
	t.Helper()
	f, err := cl.Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(want)+1)
	n, _ := f.ReadAt(got, 0)
	if n != len(want) || string(got[:n]) != string(want) {
		t.Fatalf("%s: %d bytes, equal %v", p, n, string(got[:n]) == string(want))
	}
}
