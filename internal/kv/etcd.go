package kv

// Etcd is the engine of several MDS processes: an etcd cluster (Raft
// replicated), reached through its v3 API. Each transaction is optimistic,
// as etcd's own STM: it reads one snapshot (the revision of its first
// read, a linearizable one), buffers its writes, and commits them in one
// etcd txn guarded by what it read:
//
//   - every key it read (present or absent) still has the modification
//     revision it had (a key deleted since fails this too);
//   - no key of a range it scanned changed after the snapshot (which
//     catches keys added to the range; keys it saw are compared one by
//     one, which catches keys removed);
//   - where those compares would pass etcd's limit on operations in a txn,
//     a single compare on a clock key every commit writes: no commit at
//     all since the snapshot.
//
// A txn whose guard fails is ErrConflict, and Update runs it again (Retry).
// A snapshot etcd compacted away is a conflict too.
//
// Keys live under a prefix ("braid/" by default: the engine's keys under
// "braid/d/", its clock at "braid/clock"), so one etcd cluster can hold
// other data, or several braid clusters. etcd's limits apply to a
// transaction's writes: --max-txn-ops (128 by default; braid's embedded
// members allow etcdMaxTxnOps) and --max-request-bytes (1.5 MiB). A
// transaction past them fails with ErrTooLarge rather than in part.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ErrTooLarge is a transaction past the engine's limits on one commit.
var ErrTooLarge = errors.New("kv: transaction too large for the engine")

const (
	// etcdScanPage is how many keys one range request of a scan fetches.
	etcdScanPage = 512
	// etcdDefaultMaxTxnOps is etcd's own default --max-txn-ops, assumed
	// of a cluster braid did not start.
	etcdDefaultMaxTxnOps = 128
	// etcdCallTimeout bounds one request to etcd.
	etcdCallTimeout = 10 * time.Second
	// Under the prefix: data keys under "d/", and the clock every commit
	// writes beside them.
	dataSubprefix = "d/"
	clockKey      = "clock"
)

// EtcdOptions says how to reach an etcd cluster.
type EtcdOptions struct {
	Endpoints []string // host:port or http://host:port (no TLS yet)
	Prefix    string   // key prefix; "" is "braid/"
	// MaxTxnOps is the cluster's --max-txn-ops (0: etcd's default, 128).
	MaxTxnOps int
	// DialTimeout bounds connecting (0: 10 s).
	DialTimeout time.Duration
	// TLS, if set, is how the engine authenticates to etcd and checks it.
	TLS *tls.Config
}

// Etcd is an Engine over an etcd cluster.
type Etcd struct {
	cli       *clientv3.Client
	root      string // EtcdOptions.Prefix
	prefix    string // the data keys' (root + "d/")
	clock     string // the clock key
	maxTxnOps int
	tls       *tls.Config  // EtcdOptions.TLS
	onClose   func() error // stops an embedded member, if this engine runs one

	mu     sync.Mutex
	closed bool
	lead   *leadership // set by Lead: every commit is guarded by holding it (joined: AsLeader's)
	member *leadership // set by Join: this process's session as one of several actives
	multi  bool        // Join was called: the lead guards only AsLeader commits
	led    bool        // Lead succeeded once: from then on, no commit without the lead

	stats struct{ reads, commits, conflicts atomic.Int64 }
}

// OpenEtcd connects to the etcd cluster o names.
func OpenEtcd(ctx context.Context, o EtcdOptions) (*Etcd, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	if o.Prefix == "" {
		o.Prefix = "braid/"
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = etcdDefaultMaxTxnOps
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = etcdCallTimeout
	}
	// The client outlives ctx (a signal's): its lease keepalive and the
	// lease's revoke at Close must not end with the caller's context.
	cli, err := clientv3.New(clientv3.Config{Endpoints: o.Endpoints, DialTimeout: o.DialTimeout, TLS: o.TLS,
		MaxCallSendMsgSize: 2 << 20, MaxCallRecvMsgSize: 64 << 20, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", o.Endpoints, err)
	}
	// Fail now, not at the first transaction, if no member answers.
	cctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if _, err := cli.Get(cctx, o.Prefix+clockKey); err != nil {
		cli.Close()
		return nil, fmt.Errorf("etcd %v: %w", o.Endpoints, err)
	}
	return &Etcd{cli: cli, root: o.Prefix, prefix: o.Prefix + dataSubprefix, clock: o.Prefix + clockKey, maxTxnOps: o.MaxTxnOps, tls: o.TLS}, nil
}

// MaxTxnOps is how many writes one transaction may carry (WritesLimit).
func (e *Etcd) MaxTxnOps() int { return e.maxTxnOps }

func (e *Etcd) open() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	return nil
}

func (e *Etcd) View(ctx context.Context, fn func(Reader) error) error {
	if err := e.open(); err != nil {
		return err
	}
	return retryBackingOff(ctx, func() error {
		t := e.begin(ctx)
		t.readOnly = true
		return fn(t)
	})
}

func (e *Etcd) Update(ctx context.Context, fn func(Txn) error) error {
	if err := e.open(); err != nil {
		return err
	}
	return retryBackingOff(ctx, func() error {
		t := e.begin(ctx)
		if err := fn(t); err != nil {
			return err // nothing was written: a panic in fn leaves nothing either
		}
		return t.commit()
	})
}

func (e *Etcd) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	var err error
	if l := e.leader(); l != nil {
		err = l.session.Close() // revokes the lease: a standby leads at once
	}
	err = errors.Join(err, e.cli.Close())
	if e.onClose != nil {
		err = errors.Join(err, e.onClose())
	}
	return err
}

// etcdTxn is one attempt of a transaction.
type etcdTxn struct {
	e      *Etcd
	ctx    context.Context
	rev    int64            // the snapshot: the revision of the first read (0: none yet)
	reads  map[string]int64 // key → modification revision seen (0: absent)
	ranges [][2]string      // scanned [start, end) ("" end: to the prefix's end)
	writes map[string][]byte
	dels   map[string]bool
	// readOnly: a View's, which commits nothing and needs no record of
	// what it read.
	readOnly bool
}

func (e *Etcd) begin(ctx context.Context) *etcdTxn {
	return &etcdTxn{e: e, ctx: ctx, reads: map[string]int64{}, writes: map[string][]byte{}, dels: map[string]bool{}}
}

func (t *etcdTxn) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.ctx, etcdCallTimeout)
}

// opts reads at the snapshot, once there is one. Only the first read is
// linearizable (a Raft read index round); later ones are served from the
// state of whichever member gets them, which has applied the snapshot's
// revision unless it lags (ErrFutureRev: get does it again,
// linearizably).
func (t *etcdTxn) opts(more ...clientv3.OpOption) []clientv3.OpOption {
	if t.rev != 0 {
		more = append(more, clientv3.WithRev(t.rev), clientv3.WithSerializable())
	}
	return more
}

// get runs one read, again as a linearizable one if a lagging member
// had not reached the snapshot yet.
func (t *etcdTxn) get(key string, more ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := t.call()
	defer cancel()
	t.e.stats.reads.Add(1)
	resp, err := t.e.cli.Get(ctx, key, t.opts(more...)...)
	if errors.Is(err, rpctypes.ErrFutureRev) {
		t.e.stats.reads.Add(1)
		resp, err = t.e.cli.Get(ctx, key, append(more, clientv3.WithRev(t.rev))...)
	}
	if err != nil {
		return nil, etcdErr(err)
	}
	t.noteRev(resp.Header.Revision)
	return resp, nil
}

func (t *etcdTxn) noteRev(rev int64) {
	if t.rev == 0 {
		t.rev = rev
	}
}

func etcdErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrFutureRev) {
		return ErrConflict // the snapshot is gone, or not there yet: start again on a new one
	}
	return fmt.Errorf("etcd: %w", err)
}

func (t *etcdTxn) Get(key []byte) ([]byte, error) {
	k := string(key)
	if t.dels[k] {
		return nil, nil
	}
	if v, ok := t.writes[k]; ok {
		return slices.Clone(v), nil
	}
	resp, err := t.get(t.e.prefix + k)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		t.noteRead(k, 0)
		return nil, nil
	}
	t.noteRead(k, resp.Kvs[0].ModRevision)
	return bytes.Clone(resp.Kvs[0].Value), nil
}

// GetMany reads keys in as few requests as etcd's limit on operations
// per txn allows: read-only txns of gets at the snapshot (one request for
// what would be a round trip each).
func (t *etcdTxn) GetMany(keys [][]byte) ([][]byte, error) {
	out := make([][]byte, len(keys))
	var todo []int // indexes not answered by this transaction's own writes
	for i, key := range keys {
		k := string(key)
		switch v, ok := t.writes[k]; {
		case t.dels[k]:
		case ok:
			out[i] = slices.Clone(v)
		default:
			todo = append(todo, i)
		}
	}
	if len(todo) > 0 && t.rev == 0 {
		// The first read of a transaction is a linearizable one, alone.
		v, err := t.Get(keys[todo[0]])
		if err != nil {
			return nil, err
		}
		out[todo[0]], todo = v, todo[1:]
	}
	for chunk := range slices.Chunk(todo, max(t.e.maxTxnOps, 1)) {
		resp, err := t.getChunk(keys, chunk, true)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			// A lagging member: ask again as a linearizable read.
			resp, err = t.getChunk(keys, chunk, false)
		}
		if err != nil {
			return nil, etcdErr(err)
		}
		if len(resp.Responses) != len(chunk) {
			return nil, fmt.Errorf("etcd: %d answers to %d reads", len(resp.Responses), len(chunk))
		}
		for j, i := range chunk {
			k := string(keys[i])
			rr := resp.Responses[j].GetResponseRange()
			switch {
			case rr == nil:
				return nil, fmt.Errorf("etcd: read %d of a batch answered as something else", j)
			case len(rr.Kvs) == 1 && string(rr.Kvs[0].Key) != t.e.prefix+k:
				return nil, fmt.Errorf("etcd: a read of %q answered with %q", k, rr.Kvs[0].Key)
			case len(rr.Kvs) == 0:
				t.noteRead(k, 0)
				continue
			}
			t.noteRead(k, rr.Kvs[0].ModRevision)
			out[i] = bytes.Clone(rr.Kvs[0].Value)
		}
	}
	return out, nil
}

// getChunk reads keys[i] for each i of chunk at the snapshot, in one
// read-only txn, served by the member asked if serializable.
func (t *etcdTxn) getChunk(keys [][]byte, chunk []int, serializable bool) (*clientv3.TxnResponse, error) {
	ops := make([]clientv3.Op, len(chunk))
	for j, i := range chunk {
		opts := []clientv3.OpOption{clientv3.WithRev(t.rev)}
		if serializable {
			opts = append(opts, clientv3.WithSerializable())
		}
		ops[j] = clientv3.OpGet(t.e.prefix+string(keys[i]), opts...)
	}
	ctx, cancel := t.call()
	defer cancel()
	t.e.stats.reads.Add(1)
	return t.e.cli.Txn(ctx).Then(ops...).Commit()
}

func (t *etcdTxn) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	// The range guarded is what the scan covered: to its end, or to the
	// key it stopped at.
	covered := string(end)
	defer func() {
		if !t.readOnly {
			t.ranges = append(t.ranges, [2]string{string(start), covered})
		}
	}()
	pending := t.pendingIn(start, end) // this transaction's own writes, merged in
	from := t.e.prefix + string(start)
	to := t.e.prefix + string(end)
	if end == nil {
		to = clientv3.GetPrefixRangeEnd(t.e.prefix)
	}
	emit := func(k string, v []byte) bool {
		if fn([]byte(k), v) {
			return true
		}
		covered = k + "\x00"
		return false
	}
	for {
		resp, err := t.get(from, clientv3.WithRange(to), clientv3.WithLimit(etcdScanPage))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			k := string(kv.Key[len(t.e.prefix):])
			t.noteRead(k, kv.ModRevision)
			for len(pending) > 0 && pending[0] < k {
				if v, ok := t.writes[pending[0]]; ok && !emit(pending[0], v) {
					return nil
				}
				pending = pending[1:]
			}
			if len(pending) > 0 && pending[0] == k {
				pending = pending[1:]
				if t.dels[k] {
					continue
				}
				if !emit(k, t.writes[k]) {
					return nil
				}
				continue
			}
			if t.dels[k] {
				continue
			}
			if !emit(k, kv.Value) {
				return nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	for _, k := range pending {
		if v, ok := t.writes[k]; ok && !emit(k, v) {
			return nil
		}
	}
	return nil
}

// pendingIn is the sorted keys this transaction wrote or deleted in
// [start, end).
func (t *etcdTxn) pendingIn(start, end []byte) []string {
	var out []string
	in := func(k string) bool {
		return k >= string(start) && (end == nil || k < string(end))
	}
	for k := range t.writes {
		if in(k) {
			out = append(out, k)
		}
	}
	for k := range t.dels {
		if in(k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// noteRead records what a read saw, for the commit's guard.
func (t *etcdTxn) noteRead(k string, rev int64) {
	if !t.readOnly {
		t.reads[k] = rev
	}
}

func (t *etcdTxn) Put(key, value []byte) error {
	k := string(key)
	delete(t.dels, k)
	t.writes[k] = slices.Clone(value)
	if t.writes[k] == nil {
		t.writes[k] = []byte{}
	}
	return nil
}

func (t *etcdTxn) Delete(key []byte) error {
	k := string(key)
	delete(t.writes, k)
	t.dels[k] = true
	return nil
}

// commit writes the buffered writes if nothing the transaction read has
// changed since its snapshot.
func (t *etcdTxn) commit() error {
	if len(t.writes) == 0 && len(t.dels) == 0 {
		return nil // read only: its snapshot was consistent
	}
	ops := make([]clientv3.Op, 0, len(t.writes)+len(t.dels)+1)
	for k, v := range t.writes {
		ops = append(ops, clientv3.OpPut(t.e.prefix+k, string(v)))
	}
	for k := range t.dels {
		ops = append(ops, clientv3.OpDelete(t.e.prefix+k))
	}
	ops = append(ops, clientv3.OpPut(t.e.clock, ""))
	if len(ops) > t.e.maxTxnOps {
		return fmt.Errorf("%w: %d writes, etcd allows %d in one txn (--max-txn-ops)", ErrTooLarge, len(ops), t.e.maxTxnOps)
	}
	lead, led, multi := t.e.leadState()
	if lead == nil && led {
		return ErrNotLeader // resigned, not leading again yet
	}
	if multi {
		// One of several actives: the lead guards only the leader's own
		// duties.
		switch {
		case !isAsLeader(t.ctx):
			lead = nil
		case lead == nil:
			return ErrNotLeader
		}
	}
	ctx, cancel := t.call()
	defer cancel()
	budget := t.e.maxTxnOps
	if lead != nil {
		budget-- // room for the lock's compare
	}
	exp, expecting := expectationOf(t.ctx)
	if expecting {
		budget--
	}
	guard := t.guard(budget)
	if lead != nil {
		guard = append(guard, lead.mutex.IsOwner())
	}
	if expecting {
		guard = append(guard, clientv3.Compare(clientv3.Value(t.e.prefix+string(exp.key)), "=", string(exp.value)))
	}
	t.e.stats.commits.Add(1)
	resp, err := t.e.cli.Txn(ctx).If(guard...).Then(ops...).Commit()
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("%w: %v", ErrTooLarge, err)
	case err != nil:
		return etcdErr(err)
	case !resp.Succeeded && lead != nil && !lead.holds(ctx):
		return ErrNotLeader
	case !resp.Succeeded && expecting && !t.expected(ctx, exp):
		return ErrFenced
	case !resp.Succeeded:
		t.e.stats.conflicts.Add(1)
		return ErrConflict
	}
	return nil
}

// expected reports whether exp still holds (an unreadable key: no).
func (t *etcdTxn) expected(ctx context.Context, exp expectation) bool {
	resp, err := t.e.cli.Get(ctx, t.e.prefix+string(exp.key))
	return err == nil && len(resp.Kvs) == 1 && bytes.Equal(resp.Kvs[0].Value, exp.value)
}

// EtcdStats counts an engine's requests to etcd since it opened.
type EtcdStats struct {
	Reads     int64 `json:"reads"`     // range requests (point reads and scan pages)
	Commits   int64 `json:"commits"`   // txn requests
	Conflicts int64 `json:"conflicts"` // txns refused by their guard and run again
}

// Stats reports the requests this engine made.
func (e *Etcd) Stats() EtcdStats {
	return EtcdStats{Reads: e.stats.reads.Load(), Commits: e.stats.commits.Load(), Conflicts: e.stats.conflicts.Load()}
}

// guard is what must still hold for the commit (see the package comment),
// in at most budget compares.
func (t *etcdTxn) guard(budget int) []clientv3.Cmp {
	if t.rev == 0 {
		return nil // wrote without reading
	}
	cmps := make([]clientv3.Cmp, 0, len(t.reads)+len(t.ranges))
	for k, rev := range t.reads {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.e.prefix+k), "=", rev))
	}
	for _, r := range t.ranges {
		end := t.e.prefix + r[1]
		if r[1] == "" {
			end = clientv3.GetPrefixRangeEnd(t.e.prefix)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(t.e.prefix+r[0]).WithRange(end), "<", t.rev+1))
	}
	if len(cmps) > budget {
		// Too many to name: no commit at all since the snapshot.
		return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(t.e.clock), "<", t.rev+1)}
	}
	return cmps
}
