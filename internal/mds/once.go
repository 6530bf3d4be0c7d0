package mds

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Exactly-once mutations. A client names each namespace mutation by its
// session and a sequence number (mdsproto.Once) and sends the same name
// again when it retries: after a lost reply, on a new connection, or to a
// restarted MDS. The transaction that applies a mutation also stores its
// outcome under that name,
//
//	r<session be64><seq be64>   onceRec
//
// so a retry finds the mutation done and gets its original answer, built
// from the record (a retried create opens the file it made instead of
// failing EEXIST; a retried remove or rename succeeds instead of failing
// ENOENT). A failed mutation stores nothing: it changed nothing, and its
// retry runs again.
//
// Copies of one request seldom run side by side: a retry comes on a newer
// connection, whose hello waits for the older connection's requests to
// finish (wire/fence.go), so the original has committed or failed first.
// Where they still do (the fence gave up waiting, or the copies reached
// the MDS other ways), the record is looked up inside the mutation's own
// transaction: the later copy conflicts with the first or commits after
// it, and finds the record either way.
//
// Records are bounded two ways. Each request carries the session's floor,
// below which every mutation has been answered; its transaction deletes
// the session's records below the floor. A session that ends leaves the
// records of its last mutations; a sweep deletes records older than
// onceKeep.
const (
	onceKeep       = time.Hour
	onceSweepBatch = 1024 // records one sweep reads at most
	onceFloorBatch = 64   // records below the floor one mutation deletes at most
)

// onceRec is what a mutation left for its retries.
type onceRec struct {
	Op  uint16 `json:"op"`
	Ino uint64 `json:"ino,omitempty"` // the inode a create made (its retry opens it again)
	// Inode is the answer of mkdir, link, symlink and mknod, as first sent.
	Inode  *mdsproto.Inode `json:"inode,omitempty"`
	TimeNs int64           `json:"t"` // when it committed, for the sweep
	// By is who made it (onceBy): a retry is answered only to the same
	// principal acting as the same identity.
	By string `json:"by,omitempty"`
}

// onceBy names the principal and identity of the request in ctx ("" on
// an open MDS for a caller that names no one).
func onceBy(ctx context.Context) string {
	by := ""
	if p, ok := principal(ctx); ok {
		by = p.Name
	}
	if who := whoOf(ctx); who != nil {
		by += "/" + strconv.FormatUint(uint64(who.uid), 10)
	}
	return by
}

// namedOp reports whether op is a mutation that carries a name. Others
// are idempotent (setattr, commit's publish, layouts) or administrative.
func namedOp(op uint16) bool {
	switch op {
	case mdsproto.OpCreate, mdsproto.OpMkdir, mdsproto.OpRemove, mdsproto.OpRename,
		mdsproto.OpLink, mdsproto.OpSymlink, mdsproto.OpMknod, mdsproto.OpXattr, mdsproto.OpDirFlush:
		return true
	}
	return false
}

type onceCtxKey struct{}

// onceSlot carries a named mutation through its handler to the
// transaction that records it.
type onceSlot struct {
	op  uint16
	key []byte
	mdsproto.Once
	ino   uint64
	inode *mdsproto.Inode
	self  *selfNote // what the requester's cache is granted again (cache_ops.go)
}

// onceBegin names a mutation: ctx then carries its slot, and mutate
// looks for its record in the mutation's own transaction, so a retry
// that arrives while the first attempt is still running (its connection
// dropped) waits for it or conflicts with it, never applies it twice.
func (s *Server) onceBegin(ctx context.Context, r *wire.Request) (context.Context, error) {
	if !namedOp(r.Op) {
		return ctx, nil
	}
	o, err := decode[mdsproto.Once](r.Meta)
	if err != nil || o.Session == 0 || o.Seq == 0 {
		return ctx, err // unnamed: runs as before
	}
	return context.WithValue(ctx, onceCtxKey{}, &onceSlot{op: r.Op, key: onceKey(o.Session, o.Seq), Once: o}), nil
}

// errOnceDone is a named mutation found applied before (its record).
type errOnceDone struct{ rec onceRec }

func (e *errOnceDone) Error() string { return "mds: the mutation was applied before" }

// onceAppliedBefore looks up ctx's named mutation outside a transaction
// of its own: *errOnceDone if it was applied, nil if not (or unnamed).
// For where no transaction runs (the MDS refuses new entries), so that a
// retry still gets the answer its first attempt got.
func (s *Server) onceAppliedBefore(ctx context.Context) error {
	slot, _ := ctx.Value(onceCtxKey{}).(*onceSlot)
	if slot == nil {
		return nil
	}
	var rec onceRec
	var done bool
	if err := s.kv.View(ctx, func(r kv.Reader) error {
		var err error
		done, err = getRecord(r, slot.key, &rec)
		return err
	}); err != nil || !done {
		return err
	}
	return &errOnceDone{rec}
}

// onceAnswer answers a named mutation found applied before, from its
// record.
func (s *Server) onceAnswer(ctx context.Context, r *wire.Request, rec onceRec) (any, error) {
	slot, _ := ctx.Value(onceCtxKey{}).(*onceSlot)
	if slot == nil {
		return nil, wire.Errorf(wire.ErrInternal, "an applied mutation without its name")
	}
	if rec.Op != r.Op {
		return nil, wire.Errorf(wire.ErrInvalid, "session %d sequence %d named op %d, now op %d", slot.Session, slot.Seq, rec.Op, r.Op)
	}
	if rec.By != onceBy(ctx) {
		// Another's session: its outcome (a create's capability) is not
		// this requester's to have.
		return nil, wire.Errorf(wire.ErrDenied, "session %d sequence %d is another requester's", slot.Session, slot.Seq)
	}
	slot.self = nil // the first attempt's grant of its cache is not this answer's
	return s.onceReplay(ctx, r, rec)
}

// onceReplay is the answer to a retry of a mutation that was applied.
func (s *Server) onceReplay(ctx context.Context, r *wire.Request, rec onceRec) (any, error) {
	switch r.Op {
	case mdsproto.OpCreate:
		// The file is opened again, as its create did: the capability,
		// lease and lock are the retry's (same handle and session).
		req, err := decode[mdsproto.CreateReq](r.Meta)
		if err != nil {
			return nil, err
		}
		var ino *inodeRec
		if err := s.kv.View(ctx, func(rd kv.Reader) error {
			var err error
			ino, err = getInode(rd, rec.Ino)
			return err
		}); errors.Is(err, wire.ErrNotFound) {
			return nil, wire.Errorf(wire.ErrNotFound, "the create of inode %d was applied, and the file removed since", rec.Ino)
		} else if err != nil {
			return nil, err
		}
		if s.sights.repairActive(ino.Ino, ino.Repair, s.cfg.Now()) {
			return nil, wire.Errorf(wire.ErrBusy, "inode %d is being repaired", ino.Ino)
		}
		if req.Handle != 0 {
			if err := s.router.needOwner(ino.Ino); err != nil {
				return nil, err // the lease and lock are its slot's owner's to give
			}
		}
		return s.openResp(ctx, ino, true, req.Handle, req.Session)
	case mdsproto.OpMkdir, mdsproto.OpLink, mdsproto.OpSymlink, mdsproto.OpMknod:
		if rec.Inode == nil {
			return nil, wire.Errorf(wire.ErrInternal, "the record of op %d holds no answer", r.Op)
		}
		return *rec.Inode, nil
	case mdsproto.OpXattr:
		return mdsproto.XattrResp{}, nil
	case mdsproto.OpDirFlush:
		// The open it asked for is this retry's (same handle).
		req, err := decode[mdsproto.DirFlushReq](r.Meta)
		if err != nil {
			return nil, err
		}
		return s.flushOpen(ctx, req), nil
	}
	return struct{}{}, nil
}

// noteOnce records, inside a mutation's transaction, the inode its
// answer describes (a create's is opened again; the others are kept as
// sent).
func noteOnce(ctx context.Context, in mdsproto.Inode) {
	slot, ok := ctx.Value(onceCtxKey{}).(*onceSlot)
	if !ok {
		return
	}
	slot.ino, slot.inode = in.Ino, nil
	if slot.op != mdsproto.OpCreate {
		slot.inode = &in
	}
}

// mutate runs fn in a transaction that also records a named mutation's
// outcome (and drops its session's records below the floor).
func (s *Server) mutate(ctx context.Context, fn func(kv.Txn) error) error {
	slot, _ := ctx.Value(onceCtxKey{}).(*onceSlot)
	if slot == nil {
		return s.kv.Update(ctx, fn)
	}
	var low uint64
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		var prev onceRec
		if done, err := getRecord(tx, slot.key, &prev); err != nil {
			return err
		} else if done {
			return &errOnceDone{prev}
		}
		if err := fn(tx); err != nil {
			return err
		}
		var err error
		if low, err = s.dropBelowFloor(tx, slot.Once); err != nil {
			return err
		}
		return putRecord(tx, slot.key, &onceRec{Op: slot.op, Ino: slot.ino, Inode: slot.inode, TimeNs: s.cfg.Now().UnixNano(), By: onceBy(ctx)})
	})
	if err == nil {
		s.onceLow.raise(slot.Once.Session, low)
	}
	return err
}

// onceLowWater remembers, per session, the sequence number below which
// its records are all deleted, so that a mutation looks for records to
// drop from there and not from the session's start: an LSM store keeps
// deleted keys until a compaction, and a scan steps over each of them.
// It is memory only: a session it does not know (after a restart, or
// when it was full) is looked at from its start once.
type onceLowWater struct {
	mu sync.Mutex
	m  map[uint64]uint64
}

// maxLowWaterSessions bounds onceLowWater; past it, it starts empty.
const maxLowWaterSessions = 1 << 16

func (w *onceLowWater) get(session uint64) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[session]
}

func (w *onceLowWater) raise(session, low uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m) >= maxLowWaterSessions {
		w.m = map[uint64]uint64{}
	}
	w.m[session] = max(w.m[session], low)
}

// dropBelowFloor deletes the session's records of mutations answered
// already, up to onceFloorBatch of them from the session's low-water mark
// on, and returns the new mark (a floor that jumped far is caught up by
// the next mutations).
func (s *Server) dropBelowFloor(tx kv.Txn, o mdsproto.Once) (uint64, error) {
	if o.Floor == 0 {
		return 0, nil
	}
	low, end := s.onceLow.get(o.Session), min(o.Floor, o.Seq)
	if low >= end {
		return low, nil
	}
	var keys [][]byte
	err := tx.Scan(onceKey(o.Session, low), onceKey(o.Session, end), func(k, _ []byte) bool {
		if len(k) == 17 { // r, session, seq; a damaged store's odd key is not read as a record's
			keys = append(keys, append([]byte{}, k...))
		}
		return len(keys) < onceFloorBatch
	})
	if err != nil {
		return 0, err
	}
	for _, k := range keys {
		if err := tx.Delete(k); err != nil {
			return 0, err
		}
	}
	if len(keys) == onceFloorBatch {
		return binary.BigEndian.Uint64(keys[len(keys)-1][9:]) + 1, nil
	}
	return end, nil
}

// sweepOnce deletes records older than onceKeep, a batch from cursor on,
// and returns where the next sweep starts. It reads first and writes
// only if something is stale: an idle sweep costs no commit.
func (s *Server) sweepOnce(ctx context.Context, cursor []byte) ([]byte, error) {
	if cursor == nil {
		cursor = firstKey(pOnce)
	}
	now := s.cfg.Now().UnixNano()
	var next []byte
	var stale [][]byte
	err := s.kv.View(ctx, func(r kv.Reader) error {
		next, stale = nil, nil
		seen := 0
		return r.Scan(cursor, pastKeys(pOnce), func(k, v []byte) bool {
			if seen++; seen > onceSweepBatch {
				next = append([]byte{}, k...)
				return false
			}
			var rec onceRec
			if decodeRecord(v, &rec) != nil || s.sights.deadline(sightOnce, k, rec.TimeNs+int64(onceKeep), onceKeep) <= now {
				stale = append(stale, append([]byte{}, k...)) // an undecodable record answers no retry
			}
			return true
		})
	})
	if err != nil || len(stale) == 0 {
		return next, err
	}
	// In pieces an engine with a small bound on writes per transaction
	// takes (etcd's default is 128); each piece stands on its own.
	for piece := range slices.Chunk(stale, onceDeletePiece) {
		if err := s.kv.Update(ctx, func(tx kv.Txn) error {
			for _, k := range piece {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return next, err
		}
	}
	return next, nil
}

// onceDeletePiece bounds the stale records one transaction deletes.
const onceDeletePiece = 100
