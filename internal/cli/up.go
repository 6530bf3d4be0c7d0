package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/capability"
)

const (
	upReadyTimeout = 30 * time.Second
	maxOSDs        = 256 // OSDs one braid up runs
)

type upOptions struct {
	dir           string
	osds          int
	defaultLayout string
	capacity      string
	osdDownAfter  time.Duration
	osdOutAfter   time.Duration
	capTTL        time.Duration
	repairRate    string
	scrubRate     string
	mount         string
	mountSync     string
	s3            string
	writeCache    bool
	dataTLS       bool
	mdsCount      int
	mdsCountSet   bool
	allActive     bool
	allActiveSet  bool
	mkdirSwitch   float64
	racks         int
}

func defaultDataDir() string {
	return filepath.Join(xdgDir("XDG_DATA_HOME", ".local/share"), "braid", "cluster")
}

func (e *env) upCmd() *cobra.Command {
	var o upOptions
	cmd := &cobra.Command{
		Use:   "up",
		Short: "start a whole local cluster (MDS processes, N OSDs) as child processes",
		Long: "up starts the MDS (with --mds-count, several on embedded etcd) and N OSDs on 127.0.0.1, prints\n" +
			"their endpoints, records the cluster in the per-user state file so other braid commands find\n" +
			"it, and stops them all on Ctrl-C. Started again with the same --dir it serves the same data.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.mdsCountSet = cmd.Flags().Changed("mds-count")
			o.allActiveSet = cmd.Flags().Changed("all-active")
			return e.up(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", defaultDataDir(), "directory for the cluster's data")
	f.IntVar(&o.osds, "osds", 6, "number of OSDs")
	f.IntVar(&o.mdsCount, "mds-count", 1, "MDS processes: 1 keeps the metadata in an embedded store; 3, 5 or 7 run an etcd member in each, one active and the others standing by (fixed for the cluster's life)")
	f.Float64Var(&o.mkdirSwitch, "mkdir-switch", 0.25, "probability that a new directory gets a slot of its own, not its parent's (how far a tree spreads over --all-active MDS processes; 1 hashes every directory)")
	f.BoolVar(&o.allActive, "all-active", false, "every MDS process serves its share of the files (Slice's routing; 1 to 7 of them, each with an etcd member), one leading the cluster-wide duties (fixed for the cluster's life)")
	f.StringVar(&o.defaultLayout, "default-layout", "", "layout of new files where no directory sets one (default ec:4+2; ec:2+1 below 6 OSDs, mirror:2 on 2)")
	f.StringVar(&o.capacity, "capacity", "", "bytes each OSD may store, e.g. 10GiB")
	f.DurationVar(&o.osdDownAfter, "osd-down-after", 5*time.Second, "heartbeat silence after which an OSD is down")
	f.DurationVar(&o.osdOutAfter, "osd-out-after", 10*time.Minute, "silence after which a down OSD is out and its data is rebuilt on others")
	f.DurationVar(&o.capTTL, "cap-ttl", 10*time.Minute, "lifetime of the capabilities the MDS issues (open handles renew theirs before it ends)")
	f.StringVar(&o.repairRate, "repair-rate", "256MiB", "bytes per second each repair worker may write when rebuilding")
	f.StringVar(&o.scrubRate, "scrub-rate", "64MiB", "bytes per second each repair worker may read when scrubbing")
	f.StringVar(&o.mount, "mount", "", "also mount the cluster at this path (FUSE), unmounted on Ctrl-C")
	f.StringVar(&o.mountSync, "sync", "cluster", "with --mount, the mount's write-sync policy (braid mount --sync): cluster or async")
	f.BoolVar(&o.writeCache, "write-cache", false, writeCacheHelp)
	f.BoolVar(&o.dataTLS, "data-tls", false, "OSDs serve the data path over TLS too (the MDS's port always does)")
	f.StringVar(&o.s3, "s3", "", "also serve S3 on this address (e.g. 127.0.0.1:9000; port 0: any free port)")
	f.IntVar(&o.racks, "racks", 0, "emulate N racks: OSD i is host hI in rack r(i mod N), so placement keeps parity groups apart across them (0: none named)")
	return cmd
}

// child is a server process started by up.
type child struct {
	name     string
	dir      string
	addr     string // where it serves, once it said so
	addrFile string
	logFile  string
	cmd      *exec.Cmd
	done     chan struct{}
}

func (e *env) up(o upOptions) error {
	if o.osds < 1 || o.osds > maxOSDs {
		return fmt.Errorf("--osds %d: want 1..%d", o.osds, maxOSDs)
	}
	if o.racks < 0 || o.racks > maxOSDs {
		return fmt.Errorf("--racks %d: want 0..%d", o.racks, maxOSDs)
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	// The cluster's data, keys and logs are its owner's alone.
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	keyFile := filepath.Join(dir, "cluster.key")
	if err := capability.CreateKeyFile(keyFile); err != nil {
		return err
	}
	creds, err := upCredentials(filepath.Join(dir, authDirName))
	if err != nil {
		return err
	}
	ms, allActive, err := mdsLayout(dir, o.mdsCount, o.mdsCountSet, o.allActive, o.allActiveSet)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var children []*child // MDS processes first, then OSDs
	defer func() { stopChildren(children) }()

	common := []string{"--key-file", keyFile, "--cred", creds.path(mdsCredName),
		"--osd-down-after", o.osdDownAfter.String(), "--osd-out-after", o.osdOutAfter.String(), "--cap-ttl", o.capTTL.String(),
		"--repair-rate", o.repairRate, "--scrub-rate", o.scrubRate, "--log-level", e.logLevel}
	n := max(o.osds, existingOSDs(dir)) // OSDs added by braid osd add come back too
	if o.defaultLayout == "" {
		o.defaultLayout = fittingDefaultLayout(n)
	}
	if o.defaultLayout != "" {
		common = append(common, "--default-layout", o.defaultLayout)
	}
	if allActive {
		common = append(common, "--all-active")
	}
	common = append(common, "--mkdir-switch", strconv.FormatFloat(o.mkdirSwitch, 'g', -1, 64))
	mdsKids, err := startMDSChildren(ctx, dir, ms, common)
	if err != nil {
		return err
	}
	children = append(children, mdsKids...)
	mdsAddr := mdsAddrs(ms, mdsKids)
	osds := func() []*child { return children[len(mdsKids):] }
	osdArgs := func(i int, osdDir string) ([]string, error) {
		cred, err := creds.issue(filepath.Base(osdDir)+".cred", auth.Principal{Name: filepath.Base(osdDir), Role: auth.RoleOSD})
		if err != nil {
			return nil, err
		}
		args := []string{"osd", "--dir", osdDir, "--listen", "127.0.0.1:0", "--mds-addr", mdsAddr,
			"--key-file", keyFile, "--cred", cred, "--log-level", e.logLevel}
		if o.capacity != "" {
			args = append(args, "--capacity", o.capacity)
		}
		if o.dataTLS {
			args = append(args, "--tls")
		}
		if o.writeCache {
			args = append(args, "--write-cache")
		}
		if o.racks > 0 {
			args = append(args, "--host", fmt.Sprintf("h%d", i), "--rack", fmt.Sprintf("r%d", i%o.racks))
		}
		return args, nil
	}
	for i := 0; i < n; i++ {
		osdDir := filepath.Join(dir, fmt.Sprintf("osd%d", i))
		args, err := osdArgs(i, osdDir)
		if err != nil {
			return err
		}
		c, err := startChild(ctx, fmt.Sprintf("osd%d", i), dir, osdDir, args)
		if err != nil {
			return err
		}
		children = append(children, c)
	}
	if err := waitOSDsUp(ctx, mdsAddr, creds.admin, n); err != nil {
		return err
	}
	s3Addr := ""
	if err := writeUpState(mdsAddr, osds(), dir, s3Addr, creds.path(adminCred)); err != nil {
		return err
	}
	defer os.Remove(stateFile())
	e.printEndpoints(mdsAddr, mdsKids, osds(), dir, allActive)
	for _, extra := range []struct {
		name, what string
		args       []string
	}{
		{"mount", o.mount, []string{"mount", o.mount, "--sync", o.mountSync, "--cred", creds.path("mount.cred")}},
		{"s3", o.s3, []string{"s3", "--listen", o.s3, "--cred", creds.path("s3.cred")}},
	} {
		if extra.what == "" {
			continue
		}
		c, err := startChild(ctx, extra.name, dir, dir, append(extra.args, "--mds", mdsAddr, "--log-level", e.logLevel))
		if err != nil {
			return err
		}
		defer stopChildren([]*child{c}) // first, while the servers still answer
		go func() {
			<-c.done
			if ctx.Err() == nil {
				fmt.Fprintf(e.stderr, "braid up: the %s child (%s) exited: %v\n", extra.name, extra.what, c.cmd.ProcessState)
			}
		}()
		if extra.name == "s3" {
			fmt.Fprintf(e.stdout, "  s3    http://%s (pid %d); keys: braid s3 user add NAME\n", c.addr, c.cmd.Process.Pid)
			if err := writeUpState(mdsAddr, osds(), dir, c.addr, creds.path(adminCred)); err != nil {
				return err
			}
			s3Addr = c.addr
		} else {
			fmt.Fprintf(e.stdout, "  mount %s (pid %d)\n", extra.what, c.cmd.Process.Pid)
		}
	}
	fmt.Fprintln(e.stdout, "Ctrl-C stops the cluster.")
	addOSD := func() (*child, error) {
		i := len(osds())
		osdDir := filepath.Join(dir, fmt.Sprintf("osd%d", i))
		args, err := osdArgs(i, osdDir)
		if err != nil {
			return nil, err
		}
		c, err := startChild(ctx, fmt.Sprintf("osd%d", i), dir, osdDir, args)
		if err != nil {
			return nil, err
		}
		children = append(children, c)
		return c, writeUpState(mdsAddr, osds(), dir, s3Addr, creds.path(adminCred))
	}
	return superviseChildren(ctx, e, children, addOSD)
}

// upCreds are the credentials `braid up` gives its children, issued from
// the CA in dir.
type upCreds struct {
	dir   string
	admin *auth.Credential
}

// upCredentials makes (on the first run) the CA and the credentials of a
// local cluster's fixed principals in dir.
func upCredentials(dir string) (*upCreds, error) {
	u := &upCreds{dir: dir}
	for _, c := range []struct {
		file string
		p    auth.Principal
	}{
		{mdsCredName, auth.Principal{Name: "mds", Role: auth.RoleMDS, AnyID: true}},
		{adminCred, auth.Principal{Name: "admin", Role: auth.RoleAdmin, AnyID: true}},
		{"healer.cred", auth.Principal{Name: "healer", Role: auth.RoleHealer}},
		{"mount.cred", auth.Principal{Name: "mount", Role: auth.RoleClient, AnyID: true}},
		{"s3.cred", auth.Principal{Name: "s3", Role: auth.RoleGateway, AnyID: true}},
	} {
		cred, err := ensureCredential(dir, u.path(c.file), c.p)
		if err != nil {
			return nil, err
		}
		if c.file == adminCred {
			u.admin = cred
		}
	}
	return u, nil
}

func (u *upCreds) path(file string) string { return filepath.Join(u.dir, file) }

// issue makes sure file holds a credential for p and returns its path.
func (u *upCreds) issue(file string, p auth.Principal) (string, error) {
	_, err := ensureCredential(u.dir, u.path(file), p)
	return u.path(file), err
}

// fittingDefaultLayout is the default layout of a cluster of n OSDs too
// small for the MDS's own (ec:4+2, six OSDs): one that survives the loss
// of one OSD where n allows, so that files can be written at all.
func fittingDefaultLayout(n int) string {
	switch {
	case n >= 6:
		return "" // the MDS's default
	case n >= 3:
		return "ec:2+1"
	case n == 2:
		return "mirror:2"
	}
	return "stripe:1"
}

// existingOSDs counts the osdN directories a previous run left in dir.
func existingOSDs(dir string) int {
	n := 0
	for {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("osd%d", n))); err != nil {
			return n
		}
		n++
	}
}

func writeUpState(mdsAddr string, osds []*child, dir, s3Addr, cred string) error {
	st := upState{MDS: mdsAddr, Dir: dir, Pid: os.Getpid(), S3: s3Addr, Cred: cred}
	for _, c := range osds {
		st.OSDs = append(st.OSDs, upProcess{Dir: c.dir, Addr: c.addr, Pid: c.cmd.Process.Pid})
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	return writeFileAtomic(stateFile(), b)
}

func (e *env) printEndpoints(mdsAddr string, mdsKids, osds []*child, dir string, allActive bool) {
	fmt.Fprintf(e.stdout, "braid cluster up (data in %s, logs in %s)\n", dir, filepath.Join(dir, "logs"))
	addrs := strings.Split(mdsAddr, ",")
	for i, c := range mdsKids {
		role := ""
		if len(mdsKids) > 1 {
			role = "  (standby)"
			if c.addr != "" || allActive {
				role = "  (active)"
			}
		}
		fmt.Fprintf(e.stdout, "  %-5s %-21s pid %d%s\n", c.name, addrs[i], c.cmd.Process.Pid, role)
	}
	for _, c := range osds {
		fmt.Fprintf(e.stdout, "  %-5s %-21s pid %d\n", c.name, c.addr, c.cmd.Process.Pid)
	}
	fmt.Fprintf(e.stdout, "export BRAID_MDS=%s   # or just run braid commands: they read %s\n", mdsAddr, stateFile())
}

// superviseChildren waits for Ctrl-C. A child that dies is reported and
// left down (the cluster keeps serving degraded), as a crashed server
// would be in production. SIGUSR1 (sent by braid osd add) starts one more
// OSD.
func superviseChildren(ctx context.Context, e *env, children []*child, addOSD func() (*child, error)) error {
	cases := make(chan *child, maxOSDs+1)
	watch := func(c *child) { go func() { <-c.done; cases <- c }() }
	for _, c := range children {
		watch(c)
	}
	running := len(children)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(e.stdout, "stopping cluster")
			return nil
		case <-usr1:
			if running > maxOSDs {
				fmt.Fprintf(e.stderr, "braid up: already %d OSDs; not adding more\n", maxOSDs)
				continue
			}
			c, err := addOSD()
			if err != nil {
				fmt.Fprintf(e.stderr, "braid up: add OSD: %v\n", err)
				continue
			}
			running++
			watch(c)
			fmt.Fprintf(e.stdout, "  %-5s %-21s pid %d (added)\n", c.name, c.addr, c.cmd.Process.Pid)
		case c := <-cases:
			fmt.Fprintf(e.stderr, "braid up: %s (pid %d) exited: %v; see %s\n", c.name, c.cmd.Process.Pid,
				c.cmd.ProcessState, filepath.Join(filepath.Dir(c.dir), "logs", c.name+".log"))
		}
	}
}

func startChild(ctx context.Context, name, clusterDir, dir string, args []string) (*child, error) {
	c, err := launchChild(clusterDir, name, dir, args)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(upReadyTimeout)
	for time.Now().Before(deadline) {
		if c.readAddr() {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("%s exited during start-up: %v (see %s)", name, c.cmd.ProcessState, c.logFile)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("%s did not start within %v (see %s)", name, upReadyTimeout, c.logFile)
}

// launchChild starts `braid args...` as name, its output in the cluster's
// logs, without waiting for it to serve.
func launchChild(clusterDir, name, dir string, args []string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addrFile := filepath.Join(clusterDir, name+".addr")
	_ = os.Remove(addrFile)
	logf, err := os.OpenFile(filepath.Join(clusterDir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(exe, append(args, "--addr-file", addrFile)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Never outlive up; and in a process group of its own, so a
	// terminal's Ctrl-C reaches up alone, which stops its children in
	// order (stopChildren) rather than all at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, dir: dir, cmd: cmd, done: make(chan struct{}), addrFile: addrFile, logFile: logf.Name()}
	go func() { _ = cmd.Wait(); close(c.done) }()
	return c, nil
}

// readAddr reports whether c announced where it serves, and notes it.
func (c *child) readAddr() bool {
	if b, err := os.ReadFile(c.addrFile); err == nil && strings.TrimSpace(string(b)) != "" {
		c.addr = strings.TrimSpace(string(b))
		return true
	}
	return false
}

func waitOSDsUp(ctx context.Context, mdsAddr string, cred *auth.Credential, n int) error {
	deadline := time.Now().Add(upReadyTimeout)
	var last string
	opts := braid.DefaultOptions
	opts.Credential = cred
	for time.Now().Before(deadline) {
		if c, err := braid.DialOptions(ctx, mdsAddr, opts); err == nil {
			st, err := c.Status(ctx)
			c.Close()
			up := st.UpOSDs()
			if err == nil && up >= n {
				return nil
			}
			last = strconv.Itoa(up) + " of " + strconv.Itoa(n) + " OSDs up"
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("cluster not ready within %v: %s", upReadyTimeout, last)
}

// stopChildren sends SIGTERM to every child in order (up's MDS processes
// before its OSDs: repair workers inside an MDS stop before the OSDs they read
// and write go, instead of logging every repair they were running as
// failed), and waits; one that does not stop within the grace period is
// killed.
func stopChildren(children []*child) {
	for _, c := range children {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
}
