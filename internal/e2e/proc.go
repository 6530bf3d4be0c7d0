// Package e2e tests braid as users run it: real `braid` processes on
// 127.0.0.1, killed with SIGKILL, driven by the client library and by the
// command line.
package e2e

import (
	"bytes"
	"context"
	"fmt"
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

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/braid once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "braid-e2e-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "braid")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/braidfs/braid/cmd/braid").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Proc is one server process.
type Proc struct {
	Name string
	Args []string
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// Cluster is an MDS and OSDs as separate processes.
type Cluster struct {
	t    testing.TB
	Dir  string
	bin  string
	key  string
	MDS  *Proc
	OSDs []*Proc
	// AdminCred is the administrator's credential the MDS made with the
	// cluster's CA on its first start (DIR/mds/auth/admin.cred).
	AdminCred string
	admin     *braid.Credential
	caDir     string // the CA Cred issues with ("": DIR/mds/auth)
	// started is every process the cluster started, gateways and mounts
	// too: Stop ends them all (a gateway outlived its test once).
	started []*Proc
}

// StartCluster launches an MDS (with mdsArgs added) and n OSD processes
// and waits until all OSDs are up.
func StartCluster(t testing.TB, n int, mdsArgs ...string) *Cluster {
	t.Helper()
	c := &Cluster{t: t, Dir: t.TempDir(), bin: Binary(t)}
	c.key = filepath.Join(c.Dir, "cluster.key")
	if err := capability.CreateKeyFile(c.key); err != nil {
		t.Fatal(err)
	}
	c.MDS = c.start("mds", append([]string{"mds", "--dir", filepath.Join(c.Dir, "mds"), "--listen", "127.0.0.1:0",
		"--key-file", c.key, "--osd-down-after", "2s"}, mdsArgs...)...)
	c.AdminCred = filepath.Join(c.Dir, "mds", "auth", "admin.cred")
	admin, err := braid.LoadCredential(c.AdminCred)
	if err != nil {
		t.Fatal(err)
	}
	c.admin = admin
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("osd%d", i)
		c.OSDs = append(c.OSDs, c.start(name, "osd", "--dir", filepath.Join(c.Dir, name),
			"--listen", "127.0.0.1:0", "--mds-addr", c.MDS.Addr, "--key-file", c.key, "--heartbeat", "200ms",
			"--cred", c.Cred(name, auth.RoleOSD)))
	}
	t.Cleanup(c.Stop)
	c.WaitUp(n)
	return c
}

func (c *Cluster) start(name string, args ...string) *Proc {
	c.t.Helper()
	p := &Proc{Name: name, Args: args, log: filepath.Join(c.Dir, name+".log")}
	c.started = append(c.started, p)
	c.launch(p)
	return p
}

func (c *Cluster) launch(p *Proc) {
	c.t.Helper()
	addrFile := filepath.Join(c.Dir, p.Name+".addr")
	_ = os.Remove(addrFile)
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(c.bin, append(append([]string{}, p.Args...), "--addr-file", addrFile)...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(addrFile); err == nil && len(bytes.TrimSpace(b)) > 0 {
			p.Addr = string(bytes.TrimSpace(b))
			return
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(p.log)
			c.t.Fatalf("%s exited during start-up:\n%s", p.Name, log)
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.t.Fatalf("%s did not start", p.Name)
}

// Kill sends SIGKILL and waits for the process to die.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Restart starts a killed process again, on its old address if it had a
// fixed one, with the same data.
func (c *Cluster) Restart(p *Proc) {
	c.t.Helper()
	for i, a := range p.Args {
		if a == "--listen" && i+1 < len(p.Args) {
			p.Args[i+1] = p.Addr // come back where clients and OSDs expect it
		}
	}
	c.launch(p)
}

// Cred issues a credential for name in role from the cluster's CA (any
// identity) and returns its file.
func (c *Cluster) Cred(name, role string) string {
	c.t.Helper()
	path := filepath.Join(c.Dir, name+".cred")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	caDir := c.caDir
	if caDir == "" {
		caDir = filepath.Join(c.Dir, "mds", "auth")
	}
	ca, err := auth.LoadCA(caDir)
	if err != nil {
		c.t.Fatal(err)
	}
	cred, err := ca.Issue(auth.Principal{Name: name, Role: role, AnyID: true}, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	if err := cred.Save(path); err != nil {
		c.t.Fatal(err)
	}
	return path
}

// Options are client options as the cluster's administrator.
func (c *Cluster) Options() braid.Options {
	opts := braid.DefaultOptions
	opts.Credential = c.admin
	return opts
}

// Client dials the MDS as the cluster's administrator.
func (c *Cluster) Client() *braid.Client {
	c.t.Helper()
	cl, err := braid.DialOptions(context.Background(), c.MDS.Addr, c.Options())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// WaitUp polls the MDS until n OSDs are up.
func (c *Cluster) WaitUp(n int) {
	c.t.Helper()
	ctx := context.Background()
	var last string
	testcluster.Eventually(c.t, 30*time.Second, func() bool {
		cl, err := braid.DialOptions(ctx, c.MDS.Addr, c.Options())
		if err != nil {
			last = err.Error()
			return false
		}
		defer cl.Close()
		st, err := cl.Status(ctx)
		last = fmt.Sprintf("%d up, err %v", st.UpOSDs(), err)
		return err == nil && st.UpOSDs() >= n
	}, func() string { return "cluster not up: " + last })
}

// Stop terminates every process.
func (c *Cluster) Stop() {
	for i := len(c.started) - 1; i >= 0; i-- { // the last started first: gateways and mounts before the servers
		p := c.started[i]
		if p == nil || p.cmd == nil || p.done == nil {
			continue
		}
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				p.Kill()
			}
		}
	}
}

// Logs returns every process's log, for failure messages.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, p := range append([]*Proc{c.MDS}, c.OSDs...) {
		log, _ := os.ReadFile(p.log)
		fmt.Fprintf(&b, "--- %s ---\n%s", p.Name, log)
	}
	return b.String()
}

// AddOSD starts one more OSD process and waits until the MDS sees it up.
func (c *Cluster) AddOSD() *Proc {
	c.t.Helper()
	i := len(c.OSDs)
	name := fmt.Sprintf("osd%d", i)
	p := c.start(name, "osd", "--dir", filepath.Join(c.Dir, name),
		"--listen", "127.0.0.1:0", "--mds-addr", c.MDS.Addr, "--key-file", c.key, "--heartbeat", "200ms",
		"--cred", c.Cred(name, auth.RoleOSD))
	c.OSDs = append(c.OSDs, p)
	c.WaitUp(len(c.OSDs))
	return p
}
