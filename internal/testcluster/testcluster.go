// Package testcluster runs a whole braid cluster — one MDS (or several
// sharing one engine) and N OSDs — in the test process, each listening on
// 127.0.0.1 with an OS-chosen port.
package testcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mds"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/repairworker"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/wire"
)

// Cluster is a running in-process cluster.
type Cluster struct {
	t   testing.TB
	Dir string
	Key capability.Key
	// MDS is the first MDS process (nil while it is stopped); MDSs are
	// all of them (Options.MDSCount).
	MDS  *mds.Server
	MDSs []*mds.Server
	OSDs []*osd.Server
	// shared is the engine several MDS processes share, and members
	// their handles on it (Options.MDSCount > 1).
	shared   *kv.Shared
	members  []*kv.SharedMember
	mdsAddrs []string // each MDS process's address, reused on restart
	log      *slog.Logger
	addr     []string // each OSD's address, reused on restart
	opts     Options
	eng      kv.Engine // the MDS's, when the test chose it
	// CA issues the cluster's credentials (Options.Auth); Admin is the
	// administrator's, which Dial uses.
	CA      *auth.CA
	Admin   *auth.Credential
	mdsCred *auth.Credential
}

// Issue makes a credential for p with the cluster's CA (Options.Auth).
func (c *Cluster) Issue(p auth.Principal) *auth.Credential {
	c.t.Helper()
	cred, err := c.CA.Issue(p, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	return cred
}

// mdsConfig is the configuration every MDS process of the cluster runs.
func (c *Cluster) mdsConfig(dir, listen string) mds.Config {
	return mds.Config{Dir: dir, Listen: listen, Key: c.Key,
		DefaultLayout: c.opts.DefaultLayout, OSDDownAfter: 2 * time.Second, OSDOutAfter: c.opts.OSDOutAfter,
		GCEvery: 100 * time.Millisecond, DeleteDelay: cmp.Or(c.opts.DeleteDelay, DeleteDelay), Log: c.log,
		RunRepairWorkers: repairworker.As(c.opts.Network, c.mdsCred), Network: c.opts.Network, Credential: c.mdsCred, RepairWorkers: c.opts.RepairWorkers, ScrubRateBytes: 1 << 30, RepairRateBytes: 1 << 30,
		BalanceEvery: 200 * time.Millisecond, BalanceSlackBytes: c.opts.BalanceSlackBytes, MkdirSwitch: c.opts.MkdirSwitch,
		WriterLease: time.Second, LockLease: time.Second, IntentTTL: 2 * time.Second, ResolveEvery: 100 * time.Millisecond, CapTTL: c.opts.CapTTL, KeyRetireAfter: c.opts.KeyRetireAfter}
}

// openEngine opens the metadata engine the test chose (nil: the MDS opens
// its own in its directory).
func (c *Cluster) openEngine(dir string) kv.Engine {
	c.t.Helper()
	if c.opts.KVConflicts <= 0 && c.opts.MDSCount < 2 {
		return nil
	}
	b, err := kv.OpenEmbedded(context.Background(), dir, c.log)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.opts.KVConflicts > 0 {
		b = kv.WithConflicts(b, c.opts.KVSeed, c.opts.KVConflicts)
	}
	return b
}

func (c *Cluster) startMDS(listen string) {
	c.t.Helper()
	var err error
	c.eng = c.openEngine(c.Dir)
	cfg := c.mdsConfig(c.Dir, listen)
	cfg.Engine = c.eng
	c.MDS, err = mds.Start(context.Background(), cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.MDSs = []*mds.Server{c.MDS}
	c.mdsAddrs = []string{c.MDS.Addr()}
}

// sessionTTL is how long an MDS process's session in the shared engine
// outlives its last keepalive (etcd's --meta-lease).
const sessionTTL = 2 * time.Second

// StartMDS starts MDS process i of several (Options.MDSCount), on its
// old address if it ran before: it joins the shared engine with a new
// session, and serves the slots the leader's routing table gives it.
func (c *Cluster) StartMDS(i int) {
	c.t.Helper()
	dir := filepath.Join(c.Dir, fmt.Sprintf("mds%d", i))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	if i > 0 {
		// The processes share the keys the first made (as braid up
		// copies them): the capability key ring in the engine is
		// sealed under filekeys.key.
		if err := copyKeys(filepath.Join(c.Dir, "mds0"), dir); err != nil {
			c.t.Fatal(err)
		}
	}
	name := fmt.Sprintf("mds%d", i)
	m := c.shared.Join(sessionTTL, kv.ProcessRecord{Name: name})
	cfg := c.mdsConfig(dir, c.mdsAddrs[i])
	cfg.Engine, cfg.Name = m, name
	cfg.ServeUntil, cfg.LeadUntil = m.ServeUntil, m.LeadUntil
	cfg.Actives = func(context.Context) ([]mdsproto.RouteServer, error) {
		var out []mdsproto.RouteServer
		for _, p := range c.shared.Processes() {
			out = append(out, mdsproto.RouteServer{Name: p.Name, Addr: p.Addr})
		}
		return out, nil
	}
	s, err := mds.Start(context.Background(), cfg)
	if err != nil {
		m.Leave()
		c.t.Fatal(err)
	}
	m.Announce(s.Addr())
	c.MDSs[i], c.members[i], c.mdsAddrs[i] = s, m, s.Addr()
	if i == 0 {
		c.MDS = s
	}
}

// KillMDS stops MDS process i of several as a crash does: it stops
// answering at once, and its session in the shared engine lapses after
// its ttl (its slots, and the lead if it held it, pass on then).
func (c *Cluster) KillMDS(i int) {
	if c.MDSs[i] == nil {
		return
	}
	c.MDSs[i].Close()
	c.members[i].Crash()
	c.MDSs[i], c.members[i] = nil, nil
	if i == 0 {
		c.MDS = nil
	}
}

// OSDsUpEverywhere is the fewest OSDs any running MDS process judges up:
// with several, each serves its files by its own copy of the leader's
// OSD map.
func (c *Cluster) OSDsUpEverywhere() int {
	fewest := -1
	for _, s := range c.MDSs {
		if s == nil {
			continue
		}
		if n := s.OSDsUp(); fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return fewest
}

// OSDViews describes how each running MDS process judges the OSDs, for a
// failure's report.
func (c *Cluster) OSDViews() string {
	var b strings.Builder
	for i, s := range c.MDSs {
		if s != nil {
			leads := ""
			if c.members != nil && c.members[i] != nil && c.members[i].LeadUntil().After(time.Now()) {
				leads = " (leader)"
			}
			fmt.Fprintf(&b, "mds%d%s: %v\n", i, leads, s.OSDStates())
		}
	}
	return b.String()
}

// copyKeys copies the key files MDS processes share from one directory
// to another.
func copyKeys(from, to string) error {
	for _, name := range []string{"filekeys.key", "s3secrets.key"} {
		b, err := os.ReadFile(filepath.Join(from, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// RestartMDS stops the (first) MDS and starts it again on the same
// address and metadata store.
// StartMDSAt starts the single MDS again on addr, after c.MDS.Close()
// (RestartMDS with time between for clients to act while it is down).
func (c *Cluster) StartMDSAt(addr string) {
	c.t.Helper()
	c.startMDS(addr)
}

func (c *Cluster) RestartMDS() {
	c.t.Helper()
	if c.shared != nil {
		c.KillMDS(0)
		c.StartMDS(0)
		return
	}
	addr := c.MDS.Addr()
	c.MDS.Close()
	c.startMDS(addr)
}

// DeleteDelay is how long removed files' objects outlive them in test
// clusters (production waits for capabilities to expire).
const DeleteDelay = 500 * time.Millisecond

// Options for Start.
type Options struct {
	OSDs          int
	CapacityBytes int64 // per OSD; 0 unlimited
	DefaultLayout string
	OSDOutAfter   time.Duration // 0: the production default (long)
	RepairWorkers int           // repair workers in the MDS; 0: the default, negative: none
	// BalanceSlackBytes is the OSD imbalance left alone; 0: the
	// production default (1 GiB, so small test files never move).
	BalanceSlackBytes int64
	// OSDFS is the disk every OSD stores on; nil: the real one.
	OSDFS osd.FS
	// CapTTL is how long capabilities last; 0: the production default.
	CapTTL time.Duration
	// DeleteDelay is how long removed files' objects outlive them; 0:
	// the package's DeleteDelay.
	DeleteDelay time.Duration
	// Network carries all traffic; nil: TCP on 127.0.0.1.
	Network wire.Network
	// KVConflicts, if positive, makes about one metadata transaction
	// attempt in KVConflicts lose a race (kv.WithConflicts, from KVSeed).
	KVConflicts int
	KVSeed      uint64
	// Auth runs the cluster under a CA of its own: the MDS admits only
	// its principals (mutual TLS) and Dial is its administrator.
	Auth bool
	// DataTLS makes the OSDs serve TLS too (needs Auth).
	DataTLS bool
	// Pack makes the OSDs pack small objects into their log, as `braid
	// osd` does. Off, every object is files of its own: the tests that
	// lose or damage objects by their file names need that.
	Pack bool
	// KeyRetireAfter is how long rotated-out capability keys last; 0: the
	// production default.
	KeyRetireAfter time.Duration
	// MDSCount, past 1, runs that many active MDS processes sharing one
	// engine (kv.Shared, the twin of etcd), each serving its slots of
	// the namespace.
	MDSCount int
	// MkdirSwitch is the MDS's mkdir switching probability (mds.Config).
	MkdirSwitch float64
}

// KVConflicts is how many transaction conflicts the running MDS's engine
// injected (Options.KVConflicts).
func (c *Cluster) KVConflicts() int {
	if c.eng == nil {
		return 0
	}
	return kv.Conflicts(c.eng)
}

// MDSAddr is every MDS process's address, as clients and OSDs are given
// them.
func (c *Cluster) MDSAddr() string { return strings.Join(c.mdsAddrs, ",") }

// Dial returns a client of the cluster, closed when the cluster's test
// ends (before the cluster stops).
func (c *Cluster) Dial() *braid.Client {
	c.t.Helper()
	return c.DialWith(func(*braid.Options) {})
}

// DialWith is Dial with the options set changes from the defaults.
func (c *Cluster) DialWith(set func(*braid.Options)) *braid.Client {
	c.t.Helper()
	opts := braid.DefaultOptions
	opts.Network = c.opts.Network
	opts.Credential = c.Admin
	set(&opts)
	cl, err := braid.DialOptions(context.Background(), c.MDSAddr(), opts)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Start launches the cluster and waits until every OSD is up.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	key, err := capability.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var logTo io.Writer = io.Discard
	if os.Getenv("BRAID_TEST_LOG") != "" { // the servers' logs, to debug a test
		logTo = os.Stderr
	}
	c := &Cluster{t: t, Dir: t.TempDir(), Key: key, log: slog.New(failOnError{t: t, Handler: slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug})})}
	c.opts = o
	if o.Auth {
		if c.CA, err = auth.NewCA("test", time.Now()); err != nil {
			t.Fatal(err)
		}
		c.mdsCred = c.Issue(auth.Principal{Name: "mds", Role: auth.RoleMDS, AnyID: true})
		c.Admin = c.Issue(auth.Principal{Name: "admin", Role: auth.RoleAdmin, AnyID: true})
	}
	t.Cleanup(c.Stop)
	c.startMDSs()
	for i := 0; i < o.OSDs; i++ {
		c.addr = append(c.addr, "127.0.0.1:0")
		c.OSDs = append(c.OSDs, c.startOSD(i))
	}
	c.WaitUp(o.OSDs)
	return c
}

// startMDSs starts the cluster's MDS processes.
func (c *Cluster) startMDSs() {
	c.t.Helper()
	if c.opts.MDSCount < 2 {
		c.startMDS("127.0.0.1:0")
		return
	}
	c.eng = c.openEngine(filepath.Join(c.Dir, "shared"))
	c.shared = kv.NewShared(c.eng)
	n := c.opts.MDSCount
	c.MDSs, c.members, c.mdsAddrs = make([]*mds.Server, n), make([]*kv.SharedMember, n), make([]string, n)
	for i := range n {
		c.mdsAddrs[i] = "127.0.0.1:0"
		c.StartMDS(i)
	}
}

func (c *Cluster) startOSD(i int) *osd.Server {
	c.t.Helper()
	nw := c.opts.Network
	if h, ok := nw.(interface{ Host() *simnet.Host }); ok {
		nw = h.Host() // its own host: a partition cuts it off both ways
	}
	var cred *auth.Credential
	if c.CA != nil {
		cred = c.Issue(auth.Principal{Name: fmt.Sprintf("osd%d", i), Role: auth.RoleOSD})
	}
	s, err := osd.Start(context.Background(), osd.Config{Dir: filepath.Join(c.Dir, fmt.Sprintf("osd%d", i)), Credential: cred, TLS: c.opts.DataTLS,
		Listen: c.addr[i], Network: nw, MDSAddr: c.MDSAddr(), Key: c.Key, CapacityBytes: c.opts.CapacityBytes,
		HeartbeatEvery: 100 * time.Millisecond, Log: c.log, FS: c.opts.OSDFS, NoPack: !c.opts.Pack,
		OnFatal: func(err error) { c.t.Errorf("osd %d fatal: %v", i, err) }})
	if err != nil {
		c.t.Fatal(err)
	}
	c.addr[i] = s.Addr()
	return s
}

// RestartOSD starts OSD i again on its old address and data.
func (c *Cluster) RestartOSD(i int) {
	c.t.Helper()
	c.StopOSD(i)
	c.OSDs[i] = c.startOSD(i)
}

// StartOSD starts OSD i, stopped by StopOSD, again on its old address
// and data.
func (c *Cluster) StartOSD(i int) {
	c.t.Helper()
	c.OSDs[i] = c.startOSD(i)
}

// AddOSD starts one more OSD and waits until it has registered; it
// returns its index.
func (c *Cluster) AddOSD() int {
	c.t.Helper()
	c.addr = append(c.addr, "127.0.0.1:0")
	s := c.startOSD(len(c.addr) - 1)
	c.OSDs = append(c.OSDs, s)
	Eventually(c.t, 20*time.Second, func() bool { return s.ID() != 0 },
		func() string { return "the added OSD has not registered" })
	return len(c.OSDs) - 1
}

// WaitUp polls until n OSDs have registered.
func (c *Cluster) WaitUp(n int) {
	c.t.Helper()
	registered := func() int {
		up := 0
		for _, s := range c.OSDs {
			if s != nil && s.ID() != 0 {
				up++
			}
		}
		return up
	}
	Eventually(c.t, 20*time.Second, func() bool { return registered() >= n },
		func() string { return fmt.Sprintf("%d of %d OSDs registered", registered(), n) })
}

// StopOSD stops OSD i (its data stays on disk).
func (c *Cluster) StopOSD(i int) {
	if c.OSDs[i] != nil {
		c.OSDs[i].Close()
		c.OSDs[i] = nil
	}
}

// OSDDir is OSD i's data directory.
func (c *Cluster) OSDDir(i int) string { return filepath.Join(c.Dir, fmt.Sprintf("osd%d", i)) }

// Stop shuts everything down.
func (c *Cluster) Stop() {
	for i := range c.OSDs {
		c.StopOSD(i)
	}
	if c.shared != nil {
		for i := range c.MDSs {
			c.KillMDS(i)
		}
		_ = c.shared.Close()
		return
	}
	if c.MDS != nil {
		c.MDS.Close()
		c.MDS = nil
	}
}

// failOnError fails the test on any error-level log line: servers log
// contained handler panics and fatal storage errors at that level.
type failOnError struct {
	slog.Handler
	t testing.TB
}

func (h failOnError) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		var attrs []string
		r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a.String()); return true })
		h.t.Errorf("server logged an error: %s %v", r.Message, attrs)
	}
	return h.Handler.Handle(ctx, r)
}

func (h failOnError) Enabled(context.Context, slog.Level) bool { return true }

// Eventually polls cond every 20 ms until it holds, failing the test with
// what() if it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("not within %v: %s", timeout, what())
		case <-tick.C:
		}
	}
}

// RawWrite writes p at off into component comp of file ino on the OSD
// with the given id, as a client holding a valid capability could:
// block checksums are kept, so only parity can tell. Tests use it to
// build inconsistent stripes.
func RawWrite(c *Cluster, ino uint64, comp int, osdID uint32, version uint64, off int64, p []byte) error {
	for _, s := range c.OSDs {
		if s != nil && s.ID() == osdID {
			_, err := s.Store().Write(osd.ObjKey{Ino: ino, Comp: uint32(comp)}, version, off, p, osdproto.FlagSync)
			return err
		}
	}
	return fmt.Errorf("no running OSD %d", osdID)
}

// WipeMDS stops the MDS, deletes its whole store, and starts an empty one
// on the same address: the disaster recover-metadata is for.
func (c *Cluster) WipeMDS() {
	c.t.Helper()
	addr := c.MDS.Addr()
	c.MDS.Close()
	if err := os.RemoveAll(filepath.Join(c.Dir, "meta")); err != nil {
		c.t.Fatal(err)
	}
	c.startMDS(addr)
}

// ObjectFiles counts the object data files on every OSD's disk.
func (c *Cluster) ObjectFiles() int {
	n := 0
	c.eachObjectFile(func(os.FileInfo) { n++ })
	return n
}

// AllocatedBytes is the disk space the object data files of every OSD
// take (their allocated blocks, not their lengths: holes take none).
func (c *Cluster) AllocatedBytes() int64 {
	var n int64
	c.eachObjectFile(func(info os.FileInfo) {
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		}
	})
	return n
}

// eachObjectFile calls fn for every object data file on every OSD's disk.
func (c *Cluster) eachObjectFile(fn func(os.FileInfo)) {
	for i := range c.OSDs {
		_ = filepath.Walk(c.OSDDir(i), func(p string, info os.FileInfo, err error) error {
			if err == nil && strings.HasSuffix(p, ".dat") {
				fn(info)
			}
			return nil
		})
	}
}

// WriteFile creates p through cl with o and writes data into it, failing
// the test on any error.
func WriteFile(t testing.TB, cl *braid.Client, p string, o braid.CreateOptions, data []byte) {
	t.Helper()
	f, err := cl.Create(context.Background(), p, o)
	if err != nil {
		t.Fatalf("create %s: %v", p, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", p, err)
	}
}
