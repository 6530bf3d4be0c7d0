package mds

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
)

// Open-but-unlinked files (POSIX: the data stays readable until the last
// close). Every open handle holds a lease at the MDS: writers in the store
// (w keys, which also drive the crash scrub), readers in memory (cheap;
// after an MDS restart they are re-established within one renewal). When
// the last name of a file goes while some lease is held, the inode stays
// as an orphan (Nlink 0, listed under x<ino>) and its objects stay; the
// reaper deletes it once no lease is left.

func orphanKey(ino uint64) []byte { return be64('x', ino) }

// readLeases are readers' leases, by ino then handle.
type readLeases struct {
	mu sync.Mutex
	m  map[uint64]map[uint64]time.Time
}

func (l *readLeases) renew(ino, handle uint64, until time.Time, release bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint64]map[uint64]time.Time{}
	}
	if release {
		delete(l.m[ino], handle)
		if len(l.m[ino]) == 0 {
			delete(l.m, ino)
		}
		return
	}
	if l.m[ino] == nil {
		l.m[ino] = map[uint64]time.Time{}
	}
	l.m[ino][handle] = until
}

func (l *readLeases) held(ino uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for h, until := range l.m[ino] {
		if now.Before(until) {
			return true
		}
		delete(l.m[ino], h)
	}
	return false
}

// leased reports whether any handle holds a lease on ino. Right after an
// MDS start it assumes so: readers' leases were in the old process's
// memory and come back with their next renewal.
func (s *Server) leased(r kv.Reader, ino uint64, now time.Time) (bool, error) {
	if now.Sub(s.cluster.started) < s.cfg.WriterLease {
		return true, nil
	}
	if s.readers.held(ino, now) {
		return true, nil
	}
	held := false
	err := r.Scan(be64('w', ino), kv.PrefixEnd(be64('w', ino)), func(k, v []byte) bool {
		var w writerRec
		held = jsonUnmarshal(v, &w) == nil && now.UnixNano() < w.ExpiresNs
		return !held
	})
	return held, err
}

// orphan keeps a file whose last name is gone while it is open.
func (s *Server) orphan(tx kv.Txn, rec *inodeRec) (bool, error) {
	held, err := s.leased(tx, rec.Ino, s.cfg.Now())
	if err != nil || !held {
		return false, err
	}
	rec.Nlink, rec.Parent, rec.Name = 0, 0, ""
	rec.CtimeNs = s.cfg.Now().UnixNano()
	if err := putInode(tx, rec); err != nil {
		return false, err
	}
	return true, tx.Put(orphanKey(rec.Ino), nil)
}

// reapOrphans deletes orphans no handle holds any more.
func (s *Server) reapOrphans(ctx context.Context) error {
	now := s.cfg.Now()
	var inos []uint64
	err := s.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan([]byte{'x'}, []byte{'y'}, func(k, v []byte) bool {
			if len(k) == 9 {
				inos = append(inos, binary.BigEndian.Uint64(k[1:]))
			}
			return len(inos) < resolveBatch
		})
	})
	if err != nil {
		return err
	}
	for _, ino := range inos {
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			held, err := s.leased(tx, ino, now)
			if err != nil || held {
				return err
			}
			if rec, err := getInode(tx, ino); err == nil && rec.Nlink == 0 {
				if rec.Layout != nil {
					if err := s.queueDelete(tx, ino, rec.Layout); err != nil {
						return err
					}
				}
				if err := tx.Delete(inodeKey(ino)); err != nil {
					return err
				}
			}
			return tx.Delete(orphanKey(ino))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// renewRead records a reader's lease (memory only).
func (s *Server) renewRead(req mdsproto.RenewReq) mdsproto.RenewResp {
	s.readers.renew(req.Ino, req.Handle, s.cfg.Now().Add(s.cfg.WriterLease), req.Release)
	return mdsproto.RenewResp{LeaseNs: int64(s.cfg.WriterLease)}
}
