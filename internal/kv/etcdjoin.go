package kv

// Several active MDS processes (Slice's directory servers): Join makes
// this process one of them. It takes a session (an etcd lease of ttl),
// records itself on it (Processes), and may serve while it can vouch for
// the lease (ServeUntil: a ttl from the send time of the last keepalive
// etcd acknowledged, as for the lead). In the background it queues for
// the lead lock on the same session: the process holding it also runs
// the cluster-wide duties (the OSD map, deletion, repair, the routing
// table), and only commits made with AsLeader are guarded by holding it.
// The others commit unguarded: what they change is fenced by the routing
// table instead (WithExpect), and the namespace by the transactions
// themselves. The channel Join returns is closed when the session ends
// (the lease could not be vouched for, or it was revoked): the process
// must stop serving, and may Join again.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

type asLeaderKey struct{}

// AsLeader marks ctx's commits as the leader's (its cluster-wide duties):
// on an engine that joined, they commit only while it holds the lead
// (ErrNotLeader otherwise).
func AsLeader(ctx context.Context) context.Context {
	return context.WithValue(ctx, asLeaderKey{}, true)
}

func isAsLeader(ctx context.Context) bool { b, _ := ctx.Value(asLeaderKey{}).(bool); return b }

// Join makes this process one of several active ones (see above).
func (e *Etcd) Join(ctx context.Context, ttl time.Duration, self ProcessRecord) (<-chan struct{}, error) {
	if err := e.open(); err != nil {
		return nil, err
	}
	secs := int64(max(int(ttl/time.Second), 1))
	grant, err := e.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("etcd lease: %w", err)
	}
	s, err := concurrency.NewSession(e.cli, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(secs)))
	if err != nil {
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	if err := e.putRecord(ctx, self, s.Lease()); err != nil {
		s.Close()
		return nil, err
	}
	l := &leadership{session: s, mutex: concurrency.NewMutex(s, e.root+"lead/"), deposed: make(chan struct{}), ttl: time.Duration(secs) * time.Second}
	if err := l.vouch(ctx); err != nil {
		s.Close()
		return nil, err
	}
	e.mu.Lock()
	e.member, e.lead, e.led, e.multi = l, nil, false, true
	e.mu.Unlock()
	over := make(chan struct{})
	go func() {
		l.keepVouching()
		e.mu.Lock()
		if e.member == l {
			e.member, e.lead = nil, nil
		}
		e.mu.Unlock()
		_ = s.Close()
		close(over)
	}()
	go e.campaign(l)
	return over, nil
}

// campaign waits for the lead lock on l's session and holds it for the
// session's life.
func (e *Etcd) campaign(l *leadership) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.session.Done():
		case <-l.deposed:
		}
		cancel()
	}()
	err := lockWhileAlive(ctx, l.session, l.mutex)
	if err != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, concurrency.ErrSessionExpired) {
			l.deposedOnce.Do(func() { close(l.deposed) }) // cannot queue: end the session, the process joins again
		}
		return
	}
	e.mu.Lock()
	if e.member == l {
		e.lead = l
	}
	e.mu.Unlock()
}

// ServeUntil is the time until which this joined process surely holds
// its session (zero: it has none). Past it, its slots may be another's.
func (e *Etcd) ServeUntil() time.Time {
	e.mu.Lock()
	l := e.member
	e.mu.Unlock()
	if l == nil {
		return time.Time{}
	}
	return l.until()
}

// Leave ends this process's session (revoking its lease: its slots and
// the lead, if it held it, go to others at once).
func (e *Etcd) Leave() {
	e.mu.Lock()
	l := e.member
	e.member, e.lead = nil, nil
	e.mu.Unlock()
	if l != nil {
		_ = l.session.Close()
	}
}
