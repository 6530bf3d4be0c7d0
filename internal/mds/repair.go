package mds

import (
	"bytes"
	"context"
	"encoding/binary"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Repair orchestration (Panasas: the metadata service drives
// reconstruction; Sigma: live rebalancing). The MDS decides, repair workers do
// the I/O: a worker is assigned one file at a time, the MDS moves the file's
// lost components to new OSDs in its layout (version bumped, components
// listed dirty so readers decode them) and locks the file against writers;
// the worker fences the old version on every OSD, writes the components
// and reports back; the MDS then clears them from the dirty set. Many
// repair workers repair many files at once, and because layouts are per file the
// work spreads over every OSD (declustered rebuild).

const (
	repairScanBatch = 4096             // inodes one assignment may look at
	repairLease     = repair.Lease     // an assigned file's lock; a dead worker's lock expires
	repairBackoff   = 5 * time.Second  // wait before retrying a file whose repair failed
	maxScrubQueue   = 1 << 20          // files waiting for an on-demand scrub
	rateWindow      = 10 * time.Second // repair rate averaged over this
	maxRepairErrLog = 8                // recent repair failures kept for status
)

// repairLock marks a file being repaired; stored in its inode record.
type repairLock struct {
	UntilNs int64    `json:"until_ns"`
	Kind    string   `json:"kind"`
	Version uint64   `json:"version"` // layout version the repair writes under
	Comps   []uint32 `json:"comps"`
	// Tainted is set when a writer reports one of Comps dirty during the
	// repair: a copy of it from its old OSD may then be stale.
	Tainted bool `json:"tainted,omitempty"`
	// Process is the MDS process the assigned worker runs in ("" : a
	// worker of its own), for a later leader to judge the assignment by.
	Process string `json:"process,omitempty"`
}

func (l *repairLock) active(now time.Time) bool { return l != nil && now.UnixNano() < l.UntilNs }

// repairQueue is the leader's repair queue: it finds files to repair,
// assigns them to repair workers with a decision of internal/core/repair,
// takes their reports, rebalances and scrubs. Its bookkeeping is in
// memory; what it decides is written to the store.
type repairQueue struct {
	// What the queue works with, set once at Start.
	kv      kv.Engine
	cfg     *Config
	cluster *clusterMap
	keys    *keyRing    // capabilities for the assigned workers
	gc      *collector  // objects a rebuild or move leaves behind
	sights  *sights     // whether a repair lock holds here
	leases  *leaseTable // writers, whose own dirty marks are taken
	rng     *lockedRand // placement of rebuilt components
	labels  *labelQueue // files whose objects are labelled again
	route   *router     // leadership and slot ownership
	shell   repairShell

	mu     sync.Mutex
	cursor []byte // where the next batch of a full inode scan starts
	// indexCursor is where the next batch of the repair index starts.
	indexCursor []byte
	// steadyMap is the cluster map (viewsSignature) under which a full
	// scan last completed; cycleMap the one the current full scan began under.
	steadyMap, cycleMap string
	cycleClean          bool                // the current full scan has found no work
	pending             []uint64            // found by a scan, not yet assigned
	assignments         *repair.Assignments // files assigned to workers, and which wait a backoff
	noSpace             map[uint64]bool     // files whose last repair failed for lack of space
	recent              []string            // the last maxRecentRepairs repairs and why
	scrubQ              []uint64            // files queued for scrub
	scrubIn             map[uint64]bool     // members of scrubQ
	done                []doneMark          // recent completions, for the rate
	scrubDone           []doneMark          // recent scrubs' bytes read, for their rate
	stats               mdsproto.RepairProgress
	errs                []string
	events              []mdsproto.FileEvent // the last maxFileEvents (damage.go)
	bal                 balanceState
}

// repairShell is what the repair queue asks of the rest of the MDS.
type repairShell interface {
	// updateInode changes an inode in one exactly-once transaction.
	updateInode(ctx context.Context, ino uint64, fn func(kv.Txn, *inodeRec) error) (mdsproto.Inode, error)
}

type doneMark struct {
	at    time.Time
	bytes int64
}

func newRepairQueue() *repairQueue {
	return &repairQueue{assignments: repair.NewAssignments(), noSpace: map[uint64]bool{}, scrubIn: map[uint64]bool{},
		bal: balanceState{est: map[uint32]int64{}}}
}

func (q *repairQueue) assignable(ino uint64, now time.Time) bool {
	return q.assignments.Assignable(ino, now)
}

// noteActives records the MDS processes the leader finds active now, and
// queues again the scrubs the repair workers of those that left had assigned.
func (q *repairQueue) noteActives(names []string, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ino := range q.assignments.NoteActives(names, now) {
		if q.scrubIn[ino] || len(q.scrubQ) >= maxScrubQueue {
			continue
		}
		q.scrubIn[ino] = true
		q.scrubQ = append(q.scrubQ, ino)
		q.stats.ScrubTaken--
	}
}

// forgetActives drops what a leader saw of the actives, when it no
// longer leads.
func (q *repairQueue) forgetActives() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.assignments.ForgetActives()
}

// repairHeld is repairActive for the leader's assignments: a lock whose
// worker's process is gone holds nothing (assignmentDead). ownAssigned is how
// many assignments of ino the caller itself has in flight (lockFor: 1).
func (q *repairQueue) repairHeld(ino uint64, l *repairLock, now time.Time, ownAssigned int) bool {
	return q.sights.repairActive(ino, l, now) && !q.assignmentDead(ino, l, ownAssigned)
}

// assignmentDead reports whether the repair lock l on ino is an assignment whose
// worker's process is gone (repair.Assignments.Dead).
func (q *repairQueue) assignmentDead(ino uint64, l *repairLock, ownAssigned int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.assignments.Dead(ino, l.Version, l.Process, ownAssigned)
}

// inFlight counts an assignment of ino starting (+1) or done (-1).
func (q *repairQueue) inFlight(ino uint64, d int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.assignments.InFlight(ino, d)
}

// claimantKey carries an assignment's RepairAssignReq.Process to where the assignment
// is recorded (lockFor).
type claimantKey struct{}

// assign hands a worker the next file to repair, or an empty task.
func (q *repairQueue) assign(ctx context.Context, req mdsproto.RepairAssignReq) (mdsproto.RepairTask, error) {
	if len(req.Process) > maxNameBytes {
		// Stored in the file's repair lock: bounded as a name is.
		return mdsproto.RepairTask{}, wire.Errorf(wire.ErrInvalid, "process name of %d bytes, at most %d", len(req.Process), maxNameBytes)
	}
	ctx = context.WithValue(ctx, claimantKey{}, req.Process)
	now := q.cfg.Now()
	views := q.cluster.views(now)
	found := q.scanForRepair(ctx, views, now)
	for i, ino := range found {
		task, ok, err := q.lockForRepair(ctx, ino, mdsproto.RepairRebuild, views, now)
		if err != nil || ok {
			q.mu.Lock()
			q.pending = found[i+1:] // the next assignments take these first
			q.mu.Unlock()
			return task, err
		}
	}
	for {
		ino, ok := q.nextScrub(now)
		if !ok {
			task, _, err := q.balanceAssign(ctx, views, now)
			return task, err
		}
		task, ok, err := q.lockForRepair(ctx, ino, mdsproto.RepairScrub, views, now)
		q.mu.Lock()
		q.stats.ScrubTaken++ // after it became active, so "none queued, none active" means done
		q.mu.Unlock()
		if err != nil || ok {
			return task, err
		}
	}
}

// scanForRepair looks at up to repairScanBatch inodes from the cursor and
// returns the files among them that need a repair now.
//
// Reading every inode is needed only when the cluster map changed (an OSD
// went down, out, was added, drained or removed: any file may be
// affected) and once after a start. Otherwise a file needs work only if it
// has dirty components or a repair lock, and those are listed in the heal
// index, kept in the same transactions as the inodes: a steady cluster's
// idle repair workers cost a scan of an empty index, not of every inode.
func (q *repairQueue) scanForRepair(ctx context.Context, views map[uint32]cluster.View, now time.Time) []uint64 {
	mapSig := viewsSignature(views)
	q.mu.Lock()
	if len(q.pending) > 0 {
		found := slices.DeleteFunc(q.pending, func(ino uint64) bool { return !q.assignable(ino, now) })
		q.pending = nil
		q.mu.Unlock()
		return found
	}
	full := q.cursor != nil || q.steadyMap != mapSig
	start := q.cursor
	if !full {
		start = q.indexCursor
	}
	if full && start == nil {
		q.cycleMap, q.cycleClean = mapSig, true
	}
	q.mu.Unlock()
	if full {
		return q.scanInodes(ctx, start, views, now)
	}
	return q.scanRepairIndex(ctx, start, views, now)
}

// viewsSignature is what the repair plans depend on in the cluster map.
func viewsSignature(views map[uint32]cluster.View) string {
	ids := slices.Sorted(maps.Keys(views))
	b := make([]byte, 0, 8*len(ids))
	for _, id := range ids {
		v := views[id]
		b = binary.BigEndian.AppendUint32(b, id)
		b = append(b, v.State...)
		b = append(b, 0)
		if v.Drain {
			b = append(b, 1)
		}
	}
	return string(b)
}

// scanInodes is one batch of the full scan. A full scan that completes
// without finding work makes the map it started under the steady one;
// until then full scans repeat (files whose components must move off an
// out or draining OSD are not in the repair index).
//
// Repair workers scan concurrently: a batch moves the cursor only if the cursor
// is still where the batch started, so a batch that finishes late can
// neither skip part of a pass nor end one that another batch began.
func (q *repairQueue) scanInodes(ctx context.Context, from []byte, views map[uint32]cluster.View, now time.Time) []uint64 {
	start := from
	if start == nil {
		start = firstKey(pInode)
	}
	busy := false // a file under repair or with dirty components: not a clean pass
	found, next, err := q.scanBatch(ctx, start, pastKeys(pInode), func(_ kv.Reader, k, v []byte) bool {
		var rec inodeRec
		if decodeRecord(v, &rec) != nil {
			return false
		}
		busy = busy || rec.Repair != nil || len(rec.Dirty) > 0
		return q.needsRepair(&rec, views, now)
	})
	if err != nil {
		return nil // the same batch again next time; an unread pass is no clean one
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(found) > 0 || busy {
		q.cycleClean = false
	}
	if bytes.Equal(q.cursor, from) {
		if q.cursor = next; next == nil && q.cycleClean {
			q.steadyMap = q.cycleMap // a whole pass without work
		}
	}
	return slices.DeleteFunc(found, func(ino uint64) bool { return !q.assignable(ino, now) })
}

// scanRepairIndex is one batch of the repair index.
func (q *repairQueue) scanRepairIndex(ctx context.Context, from []byte, views map[uint32]cluster.View, now time.Time) []uint64 {
	start := from
	if start == nil {
		start = firstKey(pRepair)
	}
	found, next, err := q.scanBatch(ctx, start, pastKeys(pRepair), func(r kv.Reader, k, _ []byte) bool {
		ino, _ := inoOfKey(k) // scanBatch passes only such keys
		rec, err := getInode(r, ino)
		return err == nil && q.needsRepair(rec, views, now)
	})
	if err != nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if bytes.Equal(q.indexCursor, from) { // as in scanInodes
		q.indexCursor = next
	}
	return slices.DeleteFunc(found, func(ino uint64) bool { return !q.assignable(ino, now) })
}

// scanBatch reads up to repairScanBatch keys of the form <prefix><ino be64>
// in [start, end) and returns the inos that want picks, and the key the
// next batch starts at (nil when the range was read to its end).
func (q *repairQueue) scanBatch(ctx context.Context, start, end []byte, wants func(r kv.Reader, k, v []byte) bool) (found []uint64, next []byte, err error) {
	var last []byte
	seen := 0
	err = q.kv.View(ctx, func(r kv.Reader) error {
		found, seen = found[:0], 0
		return r.Scan(start, end, func(k, v []byte) bool {
			seen++
			last = append(last[:0], k...)
			if ino, ok := inoOfKey(k); ok && wants(r, k, v) {
				found = append(found, ino)
			}
			return seen < repairScanBatch
		})
	})
	switch {
	case err != nil:
		return nil, nil, err
	case seen < repairScanBatch:
		return found, nil, nil
	}
	return found, append(last, 0), nil
}

func (q *repairQueue) needsRepair(rec *inodeRec, views map[uint32]cluster.View, now time.Time) bool {
	if rec.Layout == nil || q.repairHeld(rec.Ino, rec.Repair, now, 0) {
		return false
	}
	spec, err := specOf(rec.Layout.Spec)
	return err == nil && repair.Plan(rec.Layout.OSDs, rec.Dirty, views, spec).NeedsWork()
}

func (q *repairQueue) nextScrub(now time.Time) (uint64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// A file being repaired or backing off after a failure goes to the
	// back of the queue: it is scrubbed once it can be, not dropped.
	var later []uint64
	defer func() { q.scrubQ = append(q.scrubQ, later...) }()
	for len(q.scrubQ) > 0 {
		ino := q.scrubQ[0]
		q.scrubQ = q.scrubQ[1:]
		if q.assignable(ino, now) {
			delete(q.scrubIn, ino)
			return ino, true // counted as taken once assigned or passed over
		}
		later = append(later, ino)
	}
	return 0, false
}

// lockForRepair re-plans ino inside a transaction and, if work remains,
// installs the repaired layout and the lock and returns the task.
func (q *repairQueue) lockForRepair(ctx context.Context, ino uint64, kind string, views map[uint32]cluster.View, now time.Time) (mdsproto.RepairTask, bool, error) {
	return q.lockFor(ctx, ino, kind, nil, views, now)
}

// balanceMove is one component a rebalance moves to an emptier OSD.
type balanceMove = repair.Move

// lockFor is lockForRepair, or with bm a rebalancing move of a healthy file.
func (q *repairQueue) lockFor(ctx context.Context, ino uint64, kind string, bm *balanceMove, views map[uint32]cluster.View, now time.Time) (mdsproto.RepairTask, bool, error) {
	var task mdsproto.RepairTask
	var moveFrom map[uint32]uint32
	var why claimWhy
	process, _ := ctx.Value(claimantKey{}).(string)
	q.inFlight(ino, 1)
	defer q.inFlight(ino, -1) // after the entry in active is made
	err := q.kv.Update(ctx, func(tx kv.Txn) error {
		task, moveFrom = mdsproto.RepairTask{}, nil
		rec, err := getInode(tx, ino)
		if err != nil || rec.Layout == nil || q.repairHeld(ino, rec.Repair, now, 1) {
			return nil //nolint:nilerr // gone or busy: nothing to assign
		}
		if pending, err := hasIntents(tx, ino); err != nil || pending {
			return err // staged writes are resolved first
		}
		old, err := rec.Layout.Decode()
		if err != nil {
			return nil //nolint:nilerr
		}
		q.rng.mu.Lock()
		c, ok, err := repair.DecideAssignment(old, rec.Dirty, views, kind, bm, placement.NewPool(q.cluster.upCandidates(now)), q.rng.r)
		q.rng.mu.Unlock()
		if err != nil {
			return placementErr(err)
		}
		if !ok {
			return nil
		}
		why = claimReason(rec, c.Plan, bm, c.Kind, views)
		ver := old.Version + 1
		moveFrom = c.MoveFrom
		if len(c.GCComps) > 0 {
			if err := q.gc.add(tx, ino, ver, c.GCComps, c.GCOSDs, layoutBytes(rec, c.GCComps)); err != nil {
				return err
			}
		}
		rec.Layout = &mdsproto.Layout{Spec: rec.Layout.Spec, Groups: rec.Layout.Groups, OSDs: c.OSDs, Version: ver}
		if err := addDirty(rec, c.Comps); err != nil {
			return err
		}
		rec.Repair = &repairLock{UntilNs: now.Add(repairLease).UnixNano(), Kind: c.Kind, Version: ver, Comps: c.Comps, Process: process}
		if err := putInode(tx, rec); err != nil {
			return err
		}
		task = mdsproto.RepairTask{Kind: c.Kind, Inode: rec.Inode, Comps: c.Comps, Sources: c.Sources, MoveFrom: moveFrom}
		return nil
	})
	if err != nil || task.Kind == "" {
		if err != nil {
			q.noteRepairErr(ino, err.Error(), now)
		}
		return task, false, nil
	}
	ids := slices.Clone(task.Inode.Layout.OSDs)
	for _, id := range moveFrom {
		ids = append(ids, id)
	}
	task.Endpoints = q.cluster.endpoints(ids, now)
	task.Cap = q.keys.ring.Issue(ino, capability.Read|capability.Write, task.Inode.Layout.Version, now.Add(repairLease)).Encode()
	task.RateBytesPerS = q.cfg.RepairRateBytes
	if task.Kind == mdsproto.RepairScrub {
		task.RateBytesPerS = q.cfg.ScrubRateBytes
	}
	q.mu.Lock()
	q.assignments.Record(ino, repair.Assigned{At: now, Version: task.Inode.Layout.Version, Why: why.text, Balance: why.balance, Process: process, Kind: task.Kind})
	q.mu.Unlock()
	if task.Kind != mdsproto.RepairScrub {
		q.cfg.Log.Info("repair assigned", "ino", ino, "why", why.text)
	}
	return task, true, nil
}

// lockedRand is the MDS's seeded random source, shared by its handlers.
type lockedRand struct {
	mu sync.Mutex
	r  *mrand.Rand
}
