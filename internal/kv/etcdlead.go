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
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrNotLeader is a commit by a process that no longer holds the lock.
var ErrNotLeader = errors.New("kv: this process lost the lead to another MDS")

type leadership struct {
	session *concurrency.Session
	mutex   *concurrency.Mutex
}

// Lead waits until this engine's process holds the writers' lock, for a
// lease of ttl (whole seconds, at least one), and returns a channel closed
// when it loses it.
func (e *Etcd) Lead(ctx context.Context, ttl time.Duration) (<-chan struct{}, error) {
	if err := e.open(); err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	m := concurrency.NewMutex(s, e.root+"lead/")
	if err := m.Lock(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("etcd lock: %w", err)
	}
	e.mu.Lock()
	e.lead = &leadership{session: s, mutex: m}
	e.mu.Unlock()
	return s.Done(), nil
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
	return len(resp.Kvs) == 1 && resp.Kvs[0].Lease == int64(l.session.Lease())
}
