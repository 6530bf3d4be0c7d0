package mds

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Open-but-unlinked files (POSIX: the data stays readable until the last
// close). Every open handle holds a lease at the MDS, taken with the open
// and renewed by the client. Leases live in MDS memory: taking one costs no
// disk write, and after an MDS restart they come back with the next
// renewals (meanwhile nothing is reaped). When the last name of a file goes
// while a lease is held, the inode stays as an orphan (Nlink 0, listed
// under x<ino>) with its objects; the reaper deletes it once no lease is
// left. A writer's lease that runs out means its client died: the file is
// scrubbed for stripes the writer may have left half-written.

type lease struct {
	until  time.Time
	writer bool
}

// maxLeases bounds the leases the MDS holds: past it, new ones are
// refused (ErrBusy) rather than letting clients grow MDS memory at will.
const maxLeases = 1 << 22

// leaseTable holds every handle's lease, by ino then handle.
type leaseTable struct {
	mu sync.Mutex
	m  map[uint64]map[uint64]lease
	n  int // leases in m
}

// renew takes, extends or (release) drops a handle's lease for ttl from now.
func (l *leaseTable) renew(ino, handle uint64, writer bool, now time.Time, ttl time.Duration, release bool) (mdsproto.RenewResp, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint64]map[uint64]lease{}
	}
	_, had := l.m[ino][handle]
	if release {
		if had {
			delete(l.m[ino], handle)
			l.n--
		}
		if len(l.m[ino]) == 0 {
			delete(l.m, ino)
		}
		return mdsproto.RenewResp{}, nil
	}
	if !had && l.n >= maxLeases {
		return mdsproto.RenewResp{}, wire.Errorf(wire.ErrBusy, "%d leases held", l.n)
	}
	if l.m[ino] == nil {
		l.m[ino] = map[uint64]lease{}
	}
	if !had {
		l.n++
	}
	l.m[ino][handle] = lease{until: now.Add(ttl), writer: writer}
	return mdsproto.RenewResp{LeaseNs: int64(ttl)}, nil
}

// holds reports whether handle holds any lease on ino.
func (l *leaseTable) holds(ino, handle uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[ino][handle]
	return ok
}

// writes reports whether handle holds a writer's lease on ino.
func (l *leaseTable) writes(ino, handle uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls, ok := l.m[ino][handle]
	return ok && ls.writer && now.Before(ls.until)
}

func (l *leaseTable) held(ino uint64, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ls := range l.m[ino] {
		if now.Before(ls.until) {
			return true
		}
	}
	return false
}

// expireWriters drops leases that ran out and returns the files whose
// writer's lease was among them.
func (l *leaseTable) expireWriters(now time.Time) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for ino, hs := range l.m {
		dead := false
		for h, ls := range hs {
			if !now.Before(ls.until) {
				dead = dead || ls.writer
				delete(hs, h)
				l.n--
			}
		}
		if len(hs) == 0 {
			delete(l.m, ino)
		}
		if dead {
			out = append(out, ino)
		}
	}
	return out
}

// writers counts writers' leases.
func (l *leaseTable) writers() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := int64(0)
	for _, hs := range l.m {
		for _, ls := range hs {
			if ls.writer {
				n++
			}
		}
	}
	return n
}

// leased reports whether any handle holds a lease on ino. Right after an
// MDS start it assumes so: leases were in the old process's memory and
// come back with their next renewal. So it does for a file of a slot it
// does not serve (its owner keeps the leases, and reaps the orphan) or
// took over lately (multi.go).
func (s *Server) leased(ino uint64, now time.Time) bool {
	return now.Sub(s.cluster.live.Started) < s.cfg.WriterLease || s.leases.held(ino, now) ||
		s.router.multi() && (!s.router.owns(ino) || s.router.inGainGrace(now))
}

// orphan keeps a file whose last name is gone while it is open.
func (s *Server) orphan(tx kv.Txn, rec *inodeRec) (bool, error) {
	if !s.leased(rec.Ino, s.cfg.Now()) {
		return false, nil
	}
	rec.Nlink, rec.Parent, rec.Name = 0, 0, ""
	rec.CtimeNs = s.cfg.Now().UnixNano()
	if err := putInode(tx, rec); err != nil {
		return false, err
	}
	return true, tx.Put(orphanKey(rec.Ino), nil)
}

// reapOrphans deletes orphans no handle holds any more, resolveBatch
// a pass from where the last pass stopped (with several active processes
// the others' orphans, which this one leaves, must not hide its own).
// Its commits are fenced by the routing table it decided under.
func (s *Server) reapOrphans(ctx context.Context) error {
	if !s.router.serving() {
		return nil
	}
	ctx = s.router.fenceByRoutes(ctx)
	now := s.cfg.Now()
	var inos []uint64
	from := append(firstKey(pOrphan), s.orphanCursor...)
	err := s.kv.View(ctx, func(r kv.Reader) error {
		inos = inos[:0]
		return r.Scan(from, pastKeys(pOrphan), func(k, v []byte) bool {
			if ino, ok := inoOfKey(k); ok {
				inos = append(inos, ino)
			}
			return len(inos) < resolveBatch
		})
	})
	if err != nil {
		return err
	}
	var next []byte // where the next pass starts (nil: wrap around)
	if len(inos) == resolveBatch {
		next = binary.BigEndian.AppendUint64(nil, inos[len(inos)-1]+1)
	}
	for _, ino := range inos {
		if s.leased(ino, now) {
			continue // still open: no transaction (checked again inside one)
		}
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			if s.leased(ino, now) {
				return nil
			}
			if rec, err := getInode(tx, ino); err == nil && rec.Nlink == 0 {
				if rec.Layout != nil {
					if err := s.gc.queueDelete(tx, rec); err != nil {
						return err
					}
				}
				if err := deleteInode(tx, ino); err != nil {
					return err
				}
			}
			return tx.Delete(orphanKey(ino))
		})
		if err != nil {
			return err // the same batch again next pass
		}
	}
	s.orphanCursor = next
	return nil
}
