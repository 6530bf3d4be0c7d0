// Package mds is braid's metadata service: the namespace, per-file layouts
// and their placement, capabilities, the cluster map fed by OSD
// heartbeats, and deletion of removed files' objects. It is dataless: all
// state lives in a kv.Engine, so a restart loses nothing acknowledged.
//
// It is the shell around the decisions of internal/core: a handler reads
// the store, asks a core, writes what the core decided and sends what it
// says. Server serves the namespace and wires the other concerns, each an
// object of its own (docs/mds.md lists them): the router, OSD
// membership, the repair queue, GC, intents, extent locks, metadata
// caches, keys, labels and S3 users.
package mds

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Config configures an MDS.
type Config struct {
	Dir string // holds the embedded store (kv.OpenEmbedded) when Engine is nil
	// MinFreeBytes is the free space Dir's disk must keep: below it,
	// operations that add to the namespace are refused (ENOSPC) while
	// removals go on, so the store never meets a full disk on a commit
	// (Pebble stops the process on a failed log write). 0: 256 MiB.
	MinFreeBytes int64
	Listen       string
	Network      wire.Network // nil: TCP
	// Credential is the MDS's own (role mds): its port then speaks TLS
	// and admits only principals of the credential's CA, each limited to
	// what its role may do (authz.go). Nil: open to anyone who connects,
	// for tests in one process; the command line always sets it.
	Credential    *auth.Credential
	Key           capability.Key
	DefaultLayout string        // cluster default for new files; "" = ec:4+2
	OSDDownAfter  time.Duration // heartbeat silence after which an OSD is down
	OSDOutAfter   time.Duration // silence after which an OSD is out and its data rebuilt elsewhere
	CapTTL        time.Duration // lifetime of issued capabilities
	// KeyRetireAfter is how long a rotated-out capability key is still
	// accepted; 0: the longest capability the MDS issues, plus a minute.
	KeyRetireAfter time.Duration
	GCEvery        time.Duration // how often removed files' objects are deleted
	DeleteDelay    time.Duration // how long a removed file's objects outlive it; default CapTTL+1m
	Engine         kv.Engine     // nil: the embedded store in Dir (kv.OpenEmbedded)
	Log            *slog.Logger
	Now            func() time.Time
	Seed           uint64 // placement randomness; 0 picks one
	// Name names this process in the routing table (routing.go): unique
	// among the MDS processes sharing the engine, and the same across
	// its restarts. "": "mds".
	Name string
	// MkdirSwitch is the probability that a new directory goes to a slot
	// of its own rather than its parent's (internal/core/route): with several
	// active MDS processes, how far a tree spreads over them. 0: never.
	MkdirSwitch float64
	// RepairRateBytes and ScrubRateBytes bound each repair worker's write rate
	// (rebuild, catch-up, drain) and read rate (scrub), in bytes per second.
	RepairRateBytes int64
	ScrubRateBytes  int64
	ScrubEvery      time.Duration // background scrub period; 0 = none
	// BalanceEvery is how often the per-OSD byte estimate behind
	// rebalancing is recomputed; BalanceSlackBytes is the imbalance
	// between the fullest and emptiest OSD that is left alone.
	BalanceEvery      time.Duration
	BalanceSlackBytes int64
	// IntentTTL is how long a staged write may stay open before the
	// resolver finishes it; WriterLease how long a writer's lease lasts
	// without renewal; ResolveEvery how often both are checked.
	IntentTTL    time.Duration
	WriterLease  time.Duration
	ResolveEvery time.Duration
	// LockLease is how long a client session's extent locks last without
	// a LockWait (extlock.go), and how long a restarted MDS grants none.
	LockLease time.Duration
	// TakeoverGrace lengthens the grace a starting MDS gives clients to
	// reclaim their locks before it grants new ones: a margin for clocks
	// that run at different rates on the machines of an active and the
	// standby taking over from it.
	TakeoverGrace time.Duration
	// LeadUntil, with several MDS processes, is the time until which this
	// one surely leads (kv.Etcd.LeadUntil). Past it the MDS answers
	// nothing: a request it took then might be answered with an extent
	// lock or cache grant a successor, counting its grace from its
	// takeover, does not wait for. Every grant's lease is counted by its
	// client from before the request was sent, so grants answered to
	// requests taken earlier end within a lock lease of the takeover.
	// Nil: one MDS, leading for ever.
	LeadUntil func() time.Time
	// ServeUntil, with several active MDS processes (multi.go), is the
	// time until which this one surely holds its own session in the
	// engine (kv.Etcd.ServeUntil): it serves until then, and LeadUntil
	// says whether it also leads. Nil: one active process.
	ServeUntil func() time.Time
	// Actives lists the active MDS processes, for the leader to plan the
	// routing table by (with ServeUntil).
	Actives func(ctx context.Context) ([]mdsproto.RouteServer, error)
	// RepairWorkers are the repair workers this MDS runs in-process; negative
	// runs none (repair then waits for an external repair worker).
	RepairWorkers int
	// RunRepairWorkers runs repair workers against this MDS until ctx ends; nil
	// runs none. It is injected so the MDS does not depend on the client
	// library (internal/repairworker provides it).
	RunRepairWorkers func(ctx context.Context, log *slog.Logger, mdsAddr, process string, workers int)
	// MetaStatus describes the metadata service for status: its MDS
	// processes and engine (nil: this process, on its embedded store).
	MetaStatus func(ctx context.Context) mdsproto.MetaStatus
}

// Server is a running MDS.
type Server struct {
	cfg     Config
	kv      kv.Engine    // the coherent engine once started (useEngine)
	cl      clusterRec   // the cluster's record: its default layout
	onceLow onceLowWater // exactly-once records below this are gone, per session
	space   freeSpace    // whether the store's disk is nearly full
	inos    inoAlloc     // this process's range of inode numbers
	leases  leaseTable   // open handles' leases (orphan.go)
	rng     *lockedRand  // seeded: placement, directory slots
	// orphanCursor is where the next orphan reaping pass starts (the ino
	// after the last one looked at; nil: the first); resolveLoop's alone.
	orphanCursor []byte

	// The concerns, each an object of its own (docs/mds.md).
	router  *router      // the routing table, leadership, the shared OSD map (routing.go, multi.go)
	members *osdMembers  // OSDs' heartbeats, ids, owners, drain and removal (members.go)
	cluster *clusterMap  // the cluster map the heartbeats feed (cluster.go)
	repairs *repairQueue // the repair queue (repair.go)
	gc      *collector   // deletes removed objects (gc.go)
	intents *intents     // partial-stripe writes' intents and their resolver (intent.go)
	locks   *extentLocks // extent locks (extlock_ops.go)
	caches  *metaCaches  // metadata caches and write-back claims (cache_ops.go, claim_ops.go)
	keys    *keyRing     // capability keys (keyring.go)
	fkeys   *fileKeys    // sealed files' data keys, labels' MACs, the shared key ring (filekeys.go)
	labels  *labelQueue  // object labels for recover-metadata (recover.go)
	s3      *s3Users     // S3 users and their sealed secrets (s3users.go)
	osds    *osdClient   // the MDS's own requests to OSDs (osdcalls.go)
	sights  *sights      // stamped deadlines on this process's clock (sights.go)

	wsrv    *wire.Server
	ln      net.Listener
	started time.Time
	stop    context.CancelFunc
	wg      sync.WaitGroup
	served  [128]atomic.Uint64 // requests taken, by op (Served)
}

const (
	defaultLayout  = "ec:4+2"
	maxReaddir     = 1000
	heartbeatSkew  = 10 * time.Minute // heartbeats further off than this are refused as replays
	gcBatch        = 64               // removed files handled per GC pass
	osdCallTimeout = 10 * time.Second
)

// Start opens the metadata store and serves on cfg.Listen.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := fillDefaults(&cfg); err != nil {
		return nil, err
	}
	eng := cfg.Engine
	if eng == nil {
		// The namespace, S3 users and the CA are no other local user's
		// to read.
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chmod(cfg.Dir, 0o700); err != nil {
			return nil, err
		}
		e, err := kv.OpenEmbedded(ctx, cfg.Dir, cfg.Log)
		if err != nil {
			return nil, fmt.Errorf("open metadata store: %w", err)
		}
		eng = e
	}
	cm := newClusterMap(cfg.OSDDownAfter, cfg.OSDOutAfter, cfg.Now().Add(osdFindTime(cfg)))
	s := &Server{cfg: cfg, kv: eng, cluster: cm, osds: &osdClient{cluster: cm, pool: wire.NewPoolOn(auth.DataNetwork(cfg.Network, cfg.Credential))}, repairs: newRepairQueue(), started: cfg.Now(),
		sights: &sights{shared: cfg.LeadUntil != nil, started: cfg.Now(), now: cfg.Now},
		rng:    &lockedRand{r: mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}}
	s.router = &router{kv: eng, cfg: &s.cfg, cluster: s.cluster, repairs: s.repairs, addr: s.Addr}
	// A leader's map is republished every period and read every
	// routeRefresh: two periods missed and the leader is silent.
	s.cluster.live.StaleAfter = 2*s.router.osdMapPeriod() + routeRefresh
	seal, err := loadSealKey(cfg.Dir, s3SealKeyFile, "S3 secret sealing key")
	if err != nil {
		eng.Close()
		return nil, err
	}
	s.s3 = &s3Users{kv: eng, seal: seal, now: cfg.Now}
	wrap, err := loadSealKey(cfg.Dir, fileKeysFile, "file key wrapping key")
	if err != nil {
		eng.Close()
		return nil, err
	}
	s.fkeys = &fileKeys{wrap: wrap, log: cfg.Log}
	ring, store, err := s.loadRing(ctx)
	if err != nil {
		eng.Close()
		return nil, err
	}
	if s.keys, err = loadKeyRing(ring, cfg.Key, store); err != nil {
		eng.Close()
		return nil, err
	}
	s.keys.cfg, s.keys.cluster, s.keys.sights = &s.cfg, s.cluster, s.sights
	s.repairs.kv, s.repairs.cfg, s.repairs.cluster, s.repairs.keys, s.repairs.sights = eng, &s.cfg, s.cluster, s.keys, s.sights
	s.repairs.leases, s.repairs.rng, s.repairs.shell = &s.leases, s.rng, s
	s.gc = &collector{kv: eng, keys: s.keys, sights: s.sights, osds: s.osds, now: cfg.Now, delay: cfg.DeleteDelay, leading: s.router.leading}
	s.repairs.gc = s.gc
	s.labels = &labelQueue{kv: eng, cfg: &s.cfg, keys: s.keys, osds: s.osds, fkeys: s.fkeys, shell: s.router, in: map[uint64]bool{}}
	s.repairs.labels = s.labels
	s.router.keys, s.router.fkeys = s.keys, s.fkeys
	s.repairs.route = s.router
	s.members = &osdMembers{kv: eng, cfg: &s.cfg, cluster: s.cluster, keys: s.keys, shell: s.router}
	s.intents = &intents{kv: eng, cfg: &s.cfg, leases: &s.leases, sights: s.sights, keys: s.keys, osds: s.osds, cluster: s.cluster, shell: s.router}
	s.locks = &extentLocks{kv: eng, cfg: &s.cfg, shell: s, route: s.router}
	s.router.locks = s.locks
	s.caches = &metaCaches{kv: eng, cfg: &s.cfg, shell: s, route: s.router, maxFlushOps: flushOpsFor(kv.WritesLimit(eng))}
	if err := s.bootstrap(ctx); err != nil {
		eng.Close()
		return nil, err
	}
	if err := s.s3.sealStored(ctx); err != nil {
		eng.Close()
		return nil, err
	}
	if err := s.locks.start(ctx); err != nil {
		eng.Close()
		return nil, err
	}
	if err := s.caches.start(ctx, s.locks.incarnation); err != nil {
		eng.Close()
		return nil, err
	}
	s.useEngine(s.caches.kv)
	ln, err := wire.OrTCP(cfg.Network).Listen(cfg.Listen)
	if err != nil {
		eng.Close()
		return nil, err
	}
	if cfg.Credential != nil {
		if cfg.Credential.Principal.Role != auth.RoleMDS {
			ln.Close()
			eng.Close()
			return nil, fmt.Errorf("the MDS's credential is %s, not an mds", cfg.Credential.Principal)
		}
		ln = tls.NewListener(ln, cfg.Credential.ServerTLS())
	}
	s.ln = ln
	if err := s.router.startRoutes(ctx); err != nil {
		ln.Close()
		eng.Close()
		return nil, fmt.Errorf("routing table: %w", err)
	}
	ctx, s.stop = context.WithCancel(ctx)
	s.wsrv = wire.NewServer(s.handle, cfg.Log, wire.Limits{MaxInflightPerConn: 256, MaxInflightBytes: 64 << 20})
	s.wsrv.Identify(wire.RoleMDS, 0)
	s.wg.Add(7)
	go func() { defer s.wg.Done(); s.router.routeLoop(ctx) }()
	go func() { defer s.wg.Done(); s.labels.loop(ctx) }()
	go func() { defer s.wg.Done(); s.resolveLoop(ctx) }()
	go func() { defer s.wg.Done(); s.repairs.balanceLoop(kv.AsLeader(ctx)) }()
	go func() { defer s.wg.Done(); _ = s.wsrv.Serve(ctx, ln) }()
	go func() { defer s.wg.Done(); s.gcLoop(kv.AsLeader(ctx)) }()
	go func() { defer s.wg.Done(); s.repairs.scrubLoop(kv.AsLeader(ctx)) }()
	if cfg.RunRepairWorkers != nil && cfg.RepairWorkers > 0 {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); cfg.RunRepairWorkers(ctx, cfg.Log, s.Addr(), cfg.Name, cfg.RepairWorkers) }()
	}
	return s, nil
}

// useEngine points the MDS and each of its concerns at e: caches.start
// wraps the engine so that every write, whoever makes it, recalls the
// caches of what it changes.
func (s *Server) useEngine(e kv.Engine) {
	s.kv = e
	s.s3.kv, s.gc.kv, s.repairs.kv, s.locks.kv, s.caches.kv, s.labels.kv, s.intents.kv, s.members.kv, s.router.kv = e, e, e, e, e, e, e, e, e
}

// osdFindTime is how long after this MDS's start OSDs it has not heard
// from are still taken as up, beyond OSDDownAfter: with several MDS
// processes, an OSD whose heartbeats went to a paused active moves to the
// next address only when one times out (the OSD's heartbeat timeout, 3
// s) and may meet a standby not listening first (its dial timeout, 3 s).
// Until then a takeover would report every OSD down, and clients would
// read around all of them.
func osdFindTime(cfg Config) time.Duration {
	if cfg.LeadUntil == nil {
		return 0 // one MDS: a restart breaks the OSDs' connections, and they dial again at once
	}
	return 6 * time.Second
}

func fillDefaults(cfg *Config) error {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OSDDownAfter == 0 {
		cfg.OSDDownAfter = 5 * time.Second
	}
	if cfg.OSDOutAfter == 0 {
		cfg.OSDOutAfter = 10 * time.Minute
	}
	if cfg.Name == "" {
		cfg.Name = "mds"
	}
	if !(cfg.MkdirSwitch >= 0 && cfg.MkdirSwitch <= 1) {
		return fmt.Errorf("mds: mkdir switching probability %v is not in [0, 1]", cfg.MkdirSwitch)
	}
	if cfg.OSDOutAfter < cfg.OSDDownAfter {
		return fmt.Errorf("mds: out-after %v is shorter than down-after %v", cfg.OSDOutAfter, cfg.OSDDownAfter)
	}
	if cfg.RepairRateBytes == 0 {
		cfg.RepairRateBytes = 256 << 20
	}
	if cfg.ScrubRateBytes == 0 {
		cfg.ScrubRateBytes = 64 << 20
	}
	if cfg.IntentTTL == 0 {
		cfg.IntentTTL = 2 * time.Minute
	}
	if cfg.MinFreeBytes == 0 {
		cfg.MinFreeBytes = 256 << 20
	}
	if cfg.WriterLease == 0 {
		cfg.WriterLease = 30 * time.Second
	}
	if cfg.LockLease == 0 {
		cfg.LockLease = defaultLockLease
	}
	if cfg.ResolveEvery == 0 {
		cfg.ResolveEvery = time.Second
	}
	if cfg.BalanceEvery == 0 {
		cfg.BalanceEvery = 30 * time.Second
	}
	if cfg.BalanceSlackBytes == 0 {
		cfg.BalanceSlackBytes = 1 << 30
	}
	if cfg.RepairWorkers == 0 {
		cfg.RepairWorkers = 4
	}
	if cfg.CapTTL == 0 {
		cfg.CapTTL = 10 * time.Minute
	}
	if cfg.CapTTL < time.Second/100 {
		return fmt.Errorf("capability lifetime %v is too short", cfg.CapTTL)
	}
	if cfg.DeleteDelay == 0 {
		// Until then a handle opened before the removal keeps reading the
		// old data; after it, every capability for it has expired.
		cfg.DeleteDelay = cfg.CapTTL + time.Minute
	}
	if cfg.GCEvery == 0 {
		cfg.GCEvery = time.Second
	}
	if cfg.Seed == 0 {
		cfg.Seed = mrand.Uint64()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if len(cfg.Key) == 0 {
		return fmt.Errorf("mds: no cluster key")
	}
	if cfg.DefaultLayout != "" {
		if _, err := specOf(cfg.DefaultLayout); err != nil {
			return fmt.Errorf("default layout: %w", err)
		}
	}
	return nil
}

// bootstrap creates the root directory and cluster record on first start
// and loads the OSD table.
func (s *Server) bootstrap(ctx context.Context) error {
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		var cl clusterRec
		ok, err := getRecord(tx, keyCluster, &cl)
		if err != nil {
			return err
		}
		if !ok {
			var id [8]byte
			_, _ = rand.Read(id[:])
			cl = clusterRec{Format: recFormat, ID: hex.EncodeToString(id[:]), DefaultLayout: defaultLayout}
			now := s.cfg.Now().UnixNano()
			root := &inodeRec{Inode: mdsproto.Inode{Ino: rootIno, Type: mdsproto.TypeDir, Mode: 0o755, Nlink: 2, MtimeNs: now, CtimeNs: now}}
			if err := putInode(tx, root); err != nil {
				return err
			}
		}
		if s.cfg.DefaultLayout != "" {
			cl.DefaultLayout = s.cfg.DefaultLayout
		}
		s.cl = cl
		return putRecord(tx, keyCluster, &cl)
	})
	if err != nil {
		return err
	}
	return s.kv.View(ctx, s.cluster.load)
}

// Addr is the address the MDS listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// OSDsUp counts the OSDs this process judges up now: with several active
// processes, by the leader's OSD map as it last adopted it (which lags
// the leader's own view by up to a publication period and a refresh).
func (s *Server) OSDsUp() int {
	n := 0
	for _, state := range s.OSDStates() {
		if state == mdsproto.StateUp {
			n++
		}
	}
	return n
}

// OSDStates is each OSD's state as this process judges it now.
func (s *Server) OSDStates() map[uint32]string {
	out := map[uint32]string{}
	for id, v := range s.cluster.views(s.cfg.Now()) {
		out[id] = v.State
	}
	return out
}

// Close stops the MDS.
func (s *Server) Close() {
	s.stop()
	s.wsrv.Close()
	s.wg.Wait()
	s.osds.pool.Close()
	_ = s.kv.Close()
}

// handle decodes a request, runs its op and encodes the answer.
// Served is how many requests of op this MDS process has taken.
func (s *Server) Served(op uint16) uint64 {
	if i := int(op) - servedBase; i >= 0 && i < len(s.served) {
		return s.served[i].Load()
	}
	return 0
}

// servedBase is the first op Served counts (mdsproto's op numbers).
const servedBase = 100

func (s *Server) handle(ctx context.Context, r *wire.Request) (wire.Response, error) {
	if i := int(r.Op) - servedBase; i >= 0 && i < len(s.served) {
		s.served[i].Add(1)
	}
	if !s.router.serving() {
		return wire.Response{}, wire.Errorf(wire.ErrNotLeader, "this MDS may no longer lead the metadata service (etcd unreachable?): ask another")
	}
	ctx, err := s.authenticate(ctx)
	if err == nil {
		err = s.authorize(ctx, r.Op)
	}
	if err == nil {
		ctx, err = s.router.admit(ctx, r.Op)
	}
	if err == nil {
		ctx, err = s.actAs(ctx, r.Meta)
	}
	if err != nil {
		return wire.Response{}, err
	}
	if !leaderOps[r.Op] {
		// The leader's own duties (repair, scrub, OSDs, keys) are guarded
		// by its lead (admit), not by a table of slots: fenced by it
		// too, a claim or a repair's result in flight when the table
		// changed would fail, and its file wait out the repair lease.
		ctx = s.router.fenceByRoutes(ctx)
	}
	ctx, err = s.onceBegin(ctx, r)
	var out any
	if err == nil {
		out, err = s.dispatch(ctx, r)
	}
	if errors.Is(err, kv.ErrFenced) {
		err = wire.Errorf(wire.ErrMoved, "the routing table changed while the request was served: ask again")
	}
	if done := (*errOnceDone)(nil); errors.As(err, &done) {
		out, err = s.onceAnswer(ctx, r, done.rec)
	}
	if err != nil {
		return wire.Response{}, err
	}
	b, err := mdsproto.Marshal(out)
	if err != nil {
		return wire.Response{}, err
	}
	if slot, ok := ctx.Value(onceCtxKey{}).(*onceSlot); ok {
		if self := slot.self.answer(); self != nil {
			b = appendSelf(b, self)
		}
	}
	return wire.Response{Meta: b}, nil
}

// leading reports whether this process may act for the metadata service
// now: always when it is the only one; with several, while it can vouch
// for its lead (Config.LeadUntil). Requests are refused past it, and the
// background passes that act on OSDs (deletion, intent resolution,
// labels, scrub) stop before their next object.
func (rt *router) leading() bool {
	return rt.cfg.LeadUntil == nil || time.Now().Before(rt.cfg.LeadUntil())
}

func decode[T any](meta []byte) (T, error) {
	var v T
	return v, mdsproto.Unmarshal(meta, &v)
}

func (s *Server) dispatch(ctx context.Context, r *wire.Request) (any, error) {
	if addsToNamespace(r.Op) && s.space.low(s.cfg.Dir, s.cfg.MinFreeBytes, s.cfg.Now()) {
		if err := s.onceAppliedBefore(ctx); err != nil {
			return nil, err // a retry of what was applied gets its answer, not ENOSPC
		}
		return nil, wire.Errorf(wire.ErrNoSpace, "the MDS's disk has less than %d bytes free", s.cfg.MinFreeBytes)
	}
	switch r.Op {
	case mdsproto.OpHeartbeat:
		return call(ctx, r.Meta, s.members.heartbeat)
	case mdsproto.OpLookup:
		return call(ctx, r.Meta, s.lookup)
	case mdsproto.OpMkdir:
		return call(ctx, r.Meta, s.mkdir)
	case mdsproto.OpCreate:
		return call(ctx, r.Meta, s.create)
	case mdsproto.OpOpen:
		return call(ctx, r.Meta, s.open)
	case mdsproto.OpCommit:
		return call(ctx, r.Meta, s.commit)
	case mdsproto.OpReaddir:
		return call(ctx, r.Meta, s.readdir)
	case mdsproto.OpRemove:
		return call(ctx, r.Meta, s.remove)
	case mdsproto.OpRename:
		return call(ctx, r.Meta, s.rename)
	case mdsproto.OpSetLayout:
		return call(ctx, r.Meta, s.setLayout)
	case mdsproto.OpGetLayout:
		return call(ctx, r.Meta, s.getLayout)
	case mdsproto.OpStatus:
		return s.status(ctx)
	case mdsproto.OpMarkDirty:
		return call(ctx, r.Meta, s.repairs.markDirty)
	case mdsproto.OpRepairAssign:
		return call(ctx, r.Meta, s.repairs.assign)
	case mdsproto.OpRepairDone:
		return call(ctx, r.Meta, s.repairs.report)
	case mdsproto.OpScrub:
		return call(ctx, r.Meta, s.repairs.scrub)
	case mdsproto.OpOSDDrain:
		return call(ctx, r.Meta, s.members.drain)
	case mdsproto.OpOSDRemove:
		return call(ctx, r.Meta, s.members.removeOSD)
	case mdsproto.OpIntentBegin:
		return call(ctx, r.Meta, s.intents.begin)
	case mdsproto.OpIntentCommit:
		return call(ctx, r.Meta, s.intents.commit)
	case mdsproto.OpIntentDone:
		return call(ctx, r.Meta, s.intents.done)
	case mdsproto.OpRenew:
		return call(ctx, r.Meta, s.renew)
	case mdsproto.OpRenewBatch:
		return call(ctx, r.Meta, s.renewBatch)
	case mdsproto.OpRecover:
		return call(ctx, r.Meta, s.recoverMeta)
	case mdsproto.OpSetattr:
		return call(ctx, r.Meta, s.setattr)
	case mdsproto.OpLink:
		return call(ctx, r.Meta, s.hardLink)
	case mdsproto.OpSymlink:
		return call(ctx, r.Meta, s.symlink)
	case mdsproto.OpMknod:
		return call(ctx, r.Meta, s.mknod)
	case mdsproto.OpStat:
		return call(ctx, r.Meta, s.stat)
	case mdsproto.OpXattr:
		return call(ctx, r.Meta, s.xattr)
	case mdsproto.OpStatfs:
		return s.statfs(ctx)
	case mdsproto.OpS3UserAdd:
		return call(ctx, r.Meta, s.s3.add)
	case mdsproto.OpS3UserList:
		return call(ctx, r.Meta, s.s3.list)
	case mdsproto.OpS3UserRemove:
		return call(ctx, r.Meta, s.s3.remove)
	case mdsproto.OpS3SigningKey:
		return call(ctx, r.Meta, s.s3.signingKey)
	case mdsproto.OpExtentLock:
		return call(ctx, r.Meta, s.locks.lock)
	case mdsproto.OpExtentRelease:
		return call(ctx, r.Meta, s.locks.release)
	case mdsproto.OpLockWait:
		return call(ctx, r.Meta, s.locks.wait)
	case mdsproto.OpExtentReclaim:
		return call(ctx, r.Meta, s.locks.reclaim)
	case mdsproto.OpCacheWait:
		return call(ctx, r.Meta, s.caches.wait)
	case mdsproto.OpCacheLookup:
		return call(ctx, r.Meta, s.caches.lookup)
	case mdsproto.OpDirClaim:
		return call(ctx, r.Meta, s.caches.claim)
	case mdsproto.OpDirFlush:
		return call(ctx, r.Meta, s.dirFlush)
	case mdsproto.OpKeyRotate:
		return call(ctx, r.Meta, s.keys.rotate)
	case mdsproto.OpRoute:
		if rt := s.router.routing(); rt != nil {
			return rt, nil
		}
		return nil, wire.Errorf(wire.ErrMoved, "no routing table here yet")
	}
	return nil, wire.Errorf(wire.ErrUnknownOp, "mds op %d", r.Op)
}

func call[Req, Resp any](ctx context.Context, meta []byte, fn func(context.Context, Req) (Resp, error)) (any, error) {
	req, err := decode[Req](meta)
	if err != nil {
		return nil, err
	}
	return fn(ctx, req)
}

// maxDiskNameBytes bounds an OSD's name for its disk (HeartbeatReq.Disk).
const maxDiskNameBytes = 512

// validDomain: a host or rack name is short and printable.
func validDomain(name string) bool {
	return len(name) <= mdsproto.MaxDomainBytes && !strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f })
}
