package mds

import (
	"context"
	"encoding/binary"
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
// Copies of one request cannot run side by side: a retry comes on a newer
// connection, whose hello waits for the older connection's requests to
// finish (wire/fence.go), so the original has committed or failed first.
//
// Records are bounded two ways. Each request carries the session's floor,
// below which every mutation has been answered; its transaction deletes
// the session's records below the floor. A session that ends leaves the
// records of its last mutations; a sweep deletes records older than
// onceKeep.
const (
	onceKeep       = time.Hour
	onceSweepBatch = 1024 // records a sweep transaction deletes at most
	onceFloorBatch = 64   // records below the floor one mutation deletes at most
)

// onceRec is what a mutation left for its retries.
type onceRec struct {
	Op     uint16 `json:"op"`
	Ino    uint64 `json:"ino,omitempty"` // the inode the answer describes (create, mkdir, link, symlink, mknod)
	TimeNs int64  `json:"t"`             // when it committed, for the sweep
}

func onceKey(session, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(be64('r', session), seq)
}

// onceOps are the mutations that carry a name. Others are idempotent
// (setattr, commit's publish, layouts) or administrative.
var onceOps = map[uint16]bool{
	mdsproto.OpCreate: true, mdsproto.OpMkdir: true, mdsproto.OpRemove: true, mdsproto.OpRename: true,
	mdsproto.OpLink: true, mdsproto.OpSymlink: true, mdsproto.OpMknod: true, mdsproto.OpXattr: true,
}

type onceCtxKey struct{}

// onceSlot carries a named mutation through its handler to the
// transaction that records it.
type onceSlot struct {
	op  uint16
	key []byte
	mdsproto.Once
	ino uint64
}

// onceBegin looks up a named mutation: a done one is answered from its
// record; a new one runs with ctx carrying its slot.
func (s *Server) onceBegin(ctx context.Context, r *wire.Request) (context.Context, any, bool, error) {
	if !onceOps[r.Op] {
		return ctx, nil, false, nil
	}
	o, err := decode[mdsproto.Once](r.Meta)
	if err != nil || o.Session == 0 || o.Seq == 0 {
		return ctx, nil, false, err // unnamed: runs as before
	}
	slot := &onceSlot{op: r.Op, key: onceKey(o.Session, o.Seq), Once: o}
	var rec onceRec
	var done bool
	err = s.kv.View(ctx, func(rd kv.Reader) error {
		var err error
		done, err = getRecord(rd, slot.key, &rec)
		return err
	})
	if err != nil {
		return ctx, nil, false, err
	}
	if !done {
		return context.WithValue(ctx, onceCtxKey{}, slot), nil, false, nil
	}
	if rec.Op != r.Op {
		return ctx, nil, true, wire.Errorf(wire.ErrInvalid, "session %d sequence %d named op %d, now op %d", o.Session, o.Seq, rec.Op, r.Op)
	}
	out, err := s.onceReplay(ctx, r, rec)
	return ctx, out, true, err
}

// onceReplay is the answer to a retry of a mutation that was applied.
func (s *Server) onceReplay(ctx context.Context, r *wire.Request, rec onceRec) (any, error) {
	switch r.Op {
	case mdsproto.OpCreate:
		req, err := decode[mdsproto.CreateReq](r.Meta)
		if err != nil {
			return nil, err
		}
		var ino *inodeRec
		if err := s.kv.View(ctx, func(rd kv.Reader) error {
			var err error
			ino, err = getInode(rd, rec.Ino)
			return err
		}); err != nil {
			return nil, err
		}
		return s.openResp(ctx, ino, true, req.Handle, req.Session), nil
	case mdsproto.OpMkdir, mdsproto.OpLink, mdsproto.OpSymlink, mdsproto.OpMknod:
		return s.lookup(ctx, mdsproto.PathReq{Dir: rec.Ino})
	case mdsproto.OpXattr:
		return mdsproto.XattrResp{}, nil
	}
	return struct{}{}, nil
}

// noteOnce records, inside a mutation's transaction, the inode its
// answer describes.
func noteOnce(ctx context.Context, ino uint64) {
	if slot, ok := ctx.Value(onceCtxKey{}).(*onceSlot); ok {
		slot.ino = ino
	}
}

// mutate runs fn in a transaction that also records a named mutation's
// outcome (and drops its session's records below the floor).
func (s *Server) mutate(ctx context.Context, fn func(kv.Txn) error) error {
	slot, _ := ctx.Value(onceCtxKey{}).(*onceSlot)
	if slot == nil {
		return s.kv.Update(ctx, fn)
	}
	return s.kv.Update(ctx, func(tx kv.Txn) error {
		if err := fn(tx); err != nil {
			return err
		}
		if err := dropBelowFloor(tx, slot.Once); err != nil {
			return err
		}
		return putRecord(tx, slot.key, &onceRec{Op: slot.op, Ino: slot.ino, TimeNs: s.cfg.Now().UnixNano()})
	})
}

// dropBelowFloor deletes the session's records of mutations answered
// already (a few at a time: a floor that jumped far is caught up by the
// next mutations, and the sweep).
func dropBelowFloor(tx kv.Txn, o mdsproto.Once) error {
	if o.Floor == 0 {
		return nil
	}
	var keys [][]byte
	err := tx.Scan(onceKey(o.Session, 0), onceKey(o.Session, min(o.Floor, o.Seq)), func(k, _ []byte) bool {
		keys = append(keys, append([]byte{}, k...))
		return len(keys) < onceFloorBatch
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := tx.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// sweepOnce deletes records older than onceKeep, a batch from cursor on,
// and returns where the next sweep starts.
func (s *Server) sweepOnce(ctx context.Context, cursor []byte) ([]byte, error) {
	if cursor == nil {
		cursor = []byte{'r'}
	}
	oldest := s.cfg.Now().Add(-onceKeep).UnixNano()
	var next []byte
	err := s.kv.Update(ctx, func(tx kv.Txn) error {
		var stale [][]byte
		seen := 0
		next = nil
		err := tx.Scan(cursor, []byte{'s'}, func(k, v []byte) bool {
			if seen++; seen > onceSweepBatch {
				next = append([]byte{}, k...)
				return false
			}
			var rec onceRec
			if decodeRecord(v, &rec) != nil || rec.TimeNs < oldest {
				stale = append(stale, append([]byte{}, k...)) // an undecodable record answers no retry
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := tx.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return next, err
}
