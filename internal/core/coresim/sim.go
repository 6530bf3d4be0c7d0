package coresim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/braidfs/braid/internal/core/cache"
	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/extlock"
	"github.com/braidfs/braid/internal/core/gc"
	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/core/route"
)

// Op is one kind of event.
type Op int

// The events the generator draws.
const (
	OpTick Op = iota
	OpLockAcquire
	OpLockRelease
	OpLockWait
	OpLockClose
	OpLockReclaim
	OpCacheWait
	OpReadBegin
	OpReadGrant
	OpChange
	OpChangeStep
	OpClaimDir
	OpRecallClaim
	OpEndClaim
	OpRestart
	OpMDSJoin
	OpMDSLeave
	OpSlotMove
	OpHeartbeat
	OpOSDFail
	OpOSDRemove
	OpDirty
	OpRepairAssign
	OpRepairDone
	OpGCPass
	OpExpire
	numOps
)

var opNames = [numOps]string{"tick", "lock-acquire", "lock-release", "lock-wait", "lock-close", "lock-reclaim",
	"cache-wait", "read-begin", "read-grant", "change", "change-step", "claim-dir", "recall-claim", "end-claim",
	"restart", "mds-join", "mds-leave", "slot-move", "heartbeat", "osd-fail", "osd-remove", "dirty",
	"repair-claim", "repair-done", "gc-pass", "expire"}

func (o Op) String() string { return opNames[o] }

// Config is the one place the simulation's shape and mix are set.
type Config struct {
	Steps    int
	Sessions int // client sessions (each with two handles)
	Files    int // inodes the clients lock and cache
	OSDs     int
	Lease    time.Duration
	// Weights: how often each op is drawn, relative to the others.
	Weights [numOps]int
	// Trace, if set, is handed each step's decisions (for a replay).
	Trace func(step int, op Op, now time.Duration, decisions []string)
}

// DefaultConfig is the mix the tests run.
func DefaultConfig() Config {
	c := Config{Steps: 5000, Sessions: 4, Files: 6, OSDs: 8, Lease: 4 * time.Second}
	w := map[Op]int{OpTick: 12, OpLockAcquire: 10, OpLockRelease: 5, OpLockWait: 8, OpLockClose: 2, OpLockReclaim: 2,
		OpCacheWait: 10, OpReadBegin: 6, OpReadGrant: 6, OpChange: 6, OpChangeStep: 8, OpClaimDir: 2, OpRecallClaim: 2,
		OpEndClaim: 2, OpRestart: 1, OpMDSJoin: 1, OpMDSLeave: 1, OpSlotMove: 1, OpHeartbeat: 10, OpOSDFail: 1,
		OpOSDRemove: 1, OpDirty: 2, OpRepairAssign: 4, OpRepairDone: 3, OpGCPass: 2, OpExpire: 3}
	for op, n := range w {
		c.Weights[op] = n
	}
	return c
}

// Report is what a run did.
type Report struct {
	Steps  int
	Counts [numOps]int
	// Digest folds every decision: the same seed gives the same digest.
	Digest uint64
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d steps, digest %016x:", r.Steps, r.Digest)
	for op, n := range r.Counts {
		if n > 0 {
			fmt.Fprintf(&b, " %s=%d", Op(op), n)
		}
	}
	return b.String()
}

// env is the simulated world: the cores under test and the model of
// the clients, OSDs and repair workers around them.
type env struct {
	cfg   Config
	rng   *rand.Rand
	now   time.Time
	start time.Time
	trace []string // this step's decisions, folded into the digest
	rep   Report
	err   error

	locks      *extlock.Table
	lockIncarn uint64
	lockC      []*lockClient
	// owned are the slots the simulated MDS serves; the rest moved away.
	owned map[uint32]bool

	cache   *cache.Table
	incarn  uint64
	cacheC  []*cacheClient
	version map[uint64]uint64 // each inode's committed version
	changes []*pendingChange
	claims  map[uint64]dirClaim // dir → the claim, as the model knows it
	claimID uint64

	mds   []string // MDS processes alive
	table *route.Table

	live      cluster.Liveness
	seen      map[uint32]time.Time // each OSD's last heartbeat
	failed    map[uint32]bool      // stopped heartbeating
	removed   map[uint32]bool
	files     map[uint64]*simFile
	book      *repair.Assignments
	repairing map[uint64]workerAssignment // files a repair worker holds, by what it was handed
	gcRecs    map[uint64]*gc.Record       // by inode
	gcSeen    map[gc.Pair]int64           // objects deleted, and when
}

// Run drives the cores for cfg.Steps events from seed and returns what
// it did, or the first property that broke (naming the seed and step).
func Run(cfg Config, seed uint64) (Report, error) {
	e := newEnv(cfg, seed)
	total := 0
	for _, w := range cfg.Weights {
		total += w
	}
	if total <= 0 {
		return e.rep, fmt.Errorf("no op has weight")
	}
	h := fnv.New64a()
	for step := range cfg.Steps {
		op := e.draw(total)
		e.rep.Counts[op]++
		e.trace = e.trace[:0]
		e.do(op)
		fmt.Fprintf(h, "%d %s %s\n", step, op, strings.Join(e.trace, ";"))
		if cfg.Trace != nil {
			cfg.Trace(step, op, e.now.Sub(e.start), e.trace)
		}
		if e.err != nil {
			return e.rep, fmt.Errorf("seed %d, step %d (%s, at +%v): %w", seed, step, op, e.now.Sub(e.start), e.err)
		}
		e.rep.Steps++
	}
	e.rep.Digest = h.Sum64()
	return e.rep, nil
}

func (e *env) draw(total int) Op {
	n := e.rng.IntN(total)
	for op, w := range e.cfg.Weights {
		if n < w {
			return Op(op)
		}
		n -= w
	}
	return OpTick
}

// note records a decision for the digest.
func (e *env) note(format string, args ...any) {
	e.trace = append(e.trace, fmt.Sprintf(format, args...))
}

// fail records the first broken property.
func (e *env) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf(format, args...)
	}
}

func newEnv(cfg Config, seed uint64) *env {
	start := time.Unix(1_000_000, 0)
	e := &env{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: start, start: start,
		owned: map[uint32]bool{}, version: map[uint64]uint64{}, claims: map[uint64]dirClaim{},
		seen: map[uint32]time.Time{}, failed: map[uint32]bool{}, removed: map[uint32]bool{},
		files: map[uint64]*simFile{}, book: repair.NewAssignments(), repairing: map[uint64]workerAssignment{},
		gcRecs: map[uint64]*gc.Record{}, gcSeen: map[gc.Pair]int64{}, incarn: 1, lockIncarn: 1}
	e.locks = extlock.New(cfg.Lease, start, route.SlotOf)
	e.cache = cache.New(cfg.Lease, e.incarn)
	for slot := range uint32(route.SlotCount) {
		e.owned[slot] = true
	}
	for i := range cfg.Sessions {
		e.lockC = append(e.lockC, &lockClient{session: uint64(i + 1), held: map[uint64][]heldSpan{}})
		e.cacheC = append(e.cacheC, &cacheClient{session: uint64(i + 1), cached: map[uint64]uint64{}})
	}
	e.mds = []string{"m0"}
	e.table, _ = route.Plan(nil, e.routeServers())
	e.live = cluster.Liveness{DownAfter: 3 * time.Second, OutAfter: 30 * time.Second, Started: start}
	for id := range uint32(cfg.OSDs) {
		e.seen[id+1] = start
	}
	e.placeFiles()
	return e
}

// ino is the inode number of file i: files spread over two slots, so a
// slot move takes some of them away.
func (e *env) ino(i int) uint64 { return uint64(i+1)<<route.SlotBits | uint64(i%2) }

func (e *env) pickFile() uint64 { return e.ino(e.rng.IntN(e.cfg.Files)) }

func (e *env) do(op Op) {
	switch op {
	case OpTick:
		e.now = e.now.Add(time.Duration(e.rng.IntN(1500)) * time.Millisecond)
	case OpLockAcquire:
		e.lockAcquire()
	case OpLockRelease:
		e.lockRelease()
	case OpLockWait:
		e.lockWait()
	case OpLockClose:
		e.lockClose()
	case OpLockReclaim:
		e.lockReclaim()
	case OpCacheWait:
		e.cacheWait()
	case OpReadBegin:
		e.readBegin()
	case OpReadGrant:
		e.readGrant()
	case OpChange:
		e.change()
	case OpChangeStep:
		e.changeStep()
	case OpClaimDir:
		e.claimDir()
	case OpRecallClaim:
		e.recallClaim()
	case OpEndClaim:
		e.endClaim()
	case OpRestart:
		e.restart()
	case OpMDSJoin, OpMDSLeave:
		e.mdsChurn(op == OpMDSJoin)
	case OpSlotMove:
		e.slotMove()
	case OpHeartbeat:
		e.heartbeat()
	case OpOSDFail:
		e.osdFail()
	case OpOSDRemove:
		e.osdRemove()
	case OpDirty:
		e.dirty()
	case OpRepairAssign:
		e.repairAssign()
	case OpRepairDone:
		e.repairDone()
	case OpGCPass:
		e.gcPass()
	case OpExpire:
		e.expire()
	}
}

// sortedKeys is a map's keys in order: every walk of the model is in
// order, so a seed replays exactly.
func sortedKeys[K interface{ ~uint32 | ~uint64 }, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
