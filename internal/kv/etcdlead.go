package kv

// One MDS process writes at a time: Lead takes an etcd lock on a lease
// (etcd's concurrency.Mutex), waiting while another process holds it, and
// guards every commit with holding it. A process that loses the lock (its
// lease ran out: it could not reach etcd for ttl) finds its commits
// refused (ErrNotLeader) and is told on the channel Lead returns, to stop
// serving; the next in line takes over. So several `braid mds --meta`
// processes on one etcd cluster are one active and its standbys, and a
// SIGKILLed active is replaced within the lease's ttl.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNotLeader is a commit by a process that no longer holds the lock.
var ErrNotLeader = errors.New("kv: this process lost the lead to another MDS")

type leadership struct {
	session *concurrency.Session
	mutex   *concurrency.Mutex
	// deposed is closed when a refused commit finds the lock another's
	// while the session still runs (its key deleted behind its back).
	deposed     chan struct{}
	deposedOnce sync.Once
}

// Lead waits until this engine's process holds the writers' lock, for a
// lease of ttl (whole seconds, at least one), and returns a channel closed
// when it loses it.
func (e *Etcd) Lead(ctx context.Context, ttl time.Duration) (<-chan struct{}, error) {
	if err := e.open(); err != nil {
		return nil, err
	}
	var s *concurrency.Session
	var m *concurrency.Mutex
	for {
		var err error
		s, err = concurrency.NewSession(e.cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)))
		if err != nil {
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		m = concurrency.NewMutex(s, e.root+"lead/")
		err = m.Lock(ctx)
		if err == nil {
			break
		}
		s.Close()
		if !errors.Is(err, concurrency.ErrSessionExpired) || ctx.Err() != nil {
			return nil, fmt.Errorf("etcd lock: %w", err)
		}
		// The waiting session's lease ran out (etcd slow to answer its
		// keepalives): queue again on a new one, until ctx ends.
	}
	l := &leadership{session: s, mutex: m, deposed: make(chan struct{})}
	e.mu.Lock()
	e.lead = l
	e.mu.Unlock()
	lost := make(chan struct{})
	go func() {
		select {
		case <-s.Done():
		case <-l.deposed:
		}
		close(lost)
	}()
	return lost, nil
}

func (e *Etcd) leader() *leadership {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lead
}

// holds reports whether the lock is still this process's (after a commit
// was refused: by the lock, or by a conflict).
func (l *leadership) holds(ctx context.Context) bool {
	select {
	case <-l.session.Done():
		return false
	default:
	}
	resp, err := l.session.Client().Get(ctx, l.mutex.Key())
	if err != nil {
		return true // unknown: a conflict, retried, will tell
	}
	if len(resp.Kvs) == 1 && resp.Kvs[0].Lease == int64(l.session.Lease()) {
		return true
	}
	l.deposedOnce.Do(func() { close(l.deposed) })
	return false
}

// ErrKeysDiffer is an MDS whose key files are not the cluster's.
var ErrKeysDiffer = errors.New("kv: this MDS's key files differ from those the cluster's first MDS recorded")

// BindKeys records fp, the fingerprint of an MDS's key files, as the
// cluster's if none is recorded, and refuses another: a standby that
// made keys of its own (no copies of the first's) is stopped at its
// start, not when it takes over and nothing opens.
func (e *Etcd) BindKeys(ctx context.Context, fp []byte) error {
	key := e.root + "keys"
	ctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
	defer cancel()
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(fp))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return etcdErr(err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 1 && string(kvs[0].Value) == string(fp) {
		return nil
	}
	return ErrKeysDiffer
}
