// Package testcluster runs a whole braid cluster — one MDS and N OSDs — in
// the test process, each listening on 127.0.0.1 with an OS-chosen port.
package testcluster

import (
	"cmp"
	"context"
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
	"github.com/braidfs/braid/internal/healer"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mds"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/wire"
)

// Cluster is a running in-process cluster.
type Cluster struct {
	t    testing.TB
	Dir  string
	Key  capability.Key
	MDS  *mds.Server
	OSDs []*osd.Server
	log  *slog.Logger
	addr []string // each OSD's address, reused on restart
	opts Options
	eng  kv.Engine // the MDS's, when the test chose it
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

func (c *Cluster) startMDS(listen string) {
	c.t.Helper()
	var err error
	c.eng = nil
	if c.opts.KVConflicts > 0 {
		b, err := kv.OpenEmbedded(context.Background(), c.Dir, c.log)
		if err != nil {
			c.t.Fatal(err)
		}
		c.eng = kv.WithConflicts(b, c.opts.KVSeed, c.opts.KVConflicts)
	}
	c.MDS, err = mds.Start(context.Background(), mds.Config{Dir: c.Dir, Engine: c.eng, Listen: listen, Key: c.Key,
		DefaultLayout: c.opts.DefaultLayout, OSDDownAfter: 2 * time.Second, OSDOutAfter: c.opts.OSDOutAfter,
		GCEvery: 100 * time.Millisecond, DeleteDelay: cmp.Or(c.opts.DeleteDelay, DeleteDelay), Log: c.log,
		RunHealer: healer.As(c.opts.Network, c.mdsCred), Network: c.opts.Network, Credential: c.mdsCred, Healers: c.opts.Healers, ScrubRateBytes: 1 << 30, RepairRateBytes: 1 << 30,
		BalanceEvery: 200 * time.Millisecond, BalanceSlackBytes: c.opts.BalanceSlackBytes,
		WriterLease: time.Second, LockLease: time.Second, IntentTTL: 2 * time.Second, ResolveEvery: 100 * time.Millisecond, CapTTL: c.opts.CapTTL, KeyRetireAfter: c.opts.KeyRetireAfter})
	if err != nil {
		c.t.Fatal(err)
	}
}

// RestartMDS stops the MDS and starts it again on the same address and
// metadata store.
func (c *Cluster) RestartMDS() {
	c.t.Helper()
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
	Healers       int           // repair workers in the MDS; 0: the default, negative: none
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
	// KeyRetireAfter is how long rotated-out capability keys last; 0: the
	// production default.
	KeyRetireAfter time.Duration
}

// KVConflicts is how many transaction conflicts the running MDS's engine
// injected (Options.KVConflicts).
func (c *Cluster) KVConflicts() int {
	if c.eng == nil {
		return 0
	}
	return kv.Conflicts(c.eng)
}

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
	cl, err := braid.DialOptions(context.Background(), c.MDS.Addr(), opts)
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
	c.startMDS("127.0.0.1:0")
	t.Cleanup(c.Stop)
	for i := 0; i < o.OSDs; i++ {
		c.addr = append(c.addr, "127.0.0.1:0")
		c.OSDs = append(c.OSDs, c.startOSD(i))
	}
	c.WaitUp(o.OSDs)
	return c
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
		Listen: c.addr[i], Network: nw, MDSAddr: c.MDS.Addr(), Key: c.Key, CapacityBytes: c.opts.CapacityBytes,
		HeartbeatEvery: 100 * time.Millisecond, Log: c.log, FS: c.opts.OSDFS,
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
