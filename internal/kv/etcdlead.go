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

	ttl        time.Duration
	mu         sync.Mutex
	validUntil time.Time // the lease surely lives until then (vouch)
}

// Lead waits until this engine's process holds the writers' lock, for a
// lease of ttl (whole seconds, at least one), and returns a channel closed
// when it loses it. Meanwhile self is this process's record (Processes),
// kept on the same lease.
func (e *Etcd) Lead(ctx context.Context, ttl time.Duration, self ProcessRecord) (<-chan struct{}, error) {
	if err := e.open(); err != nil {
		return nil, err
	}
	var s *concurrency.Session
	var m *concurrency.Mutex
	for {
		var err error
		// The lease is granted within ctx, so an MDS cut off from etcd
		// still stops on a signal; the session keeps it alive apart from
		// ctx, so that Close revokes it (a standby leads at once).
		secs := int64(max(int(ttl/time.Second), 1))
		grant, err := e.cli.Grant(ctx, secs)
		if err != nil {
			return nil, fmt.Errorf("etcd lease: %w", err)
		}
		s, err = concurrency.NewSession(e.cli, concurrency.WithLease(grant.ID), concurrency.WithTTL(int(secs)))
		if err != nil {
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		if err := e.putRecord(ctx, self, s.Lease()); err != nil {
			s.Close()
			return nil, err
		}
		m = concurrency.NewMutex(s, e.root+"lead/")
		err = lockWhileAlive(ctx, s, m)
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
	l := &leadership{session: s, mutex: m, deposed: make(chan struct{}), ttl: time.Duration(max(int(ttl/time.Second), 1)) * time.Second}
	if err := l.vouch(ctx); err != nil {
		s.Close()
		return nil, err
	}
	e.mu.Lock()
	e.lead, e.led = l, true
	e.mu.Unlock()
	lost := make(chan struct{})
	go func() {
		l.keepVouching()
		close(lost)
	}()
	return lost, nil
}

// vouch renews the lease once, and on success moves validUntil to a ttl
// after the renewal was sent: etcd renewed it later than that, so the
// lease surely lives until then, whatever the time the answer took to
// arrive (concurrency.Session counts its ttl from the answer's arrival,
// which a paused process learns late).
func (l *leadership) vouch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	sent := time.Now()
	resp, err := l.session.Client().KeepAliveOnce(ctx, l.session.Lease())
	if err != nil {
		return fmt.Errorf("etcd lease: %w", err)
	}
	until := sent.Add(min(time.Duration(resp.TTL)*time.Second, l.ttl))
	l.mu.Lock()
	if until.After(l.validUntil) {
		l.validUntil = until
	}
	l.mu.Unlock()
	return nil
}

// keepVouching renews the lease every quarter ttl until it cannot vouch
// for it any longer (validUntil passed), the session ends, or the process
// was deposed.
func (l *leadership) keepVouching() {
	tick := time.NewTicker(l.ttl / 4)
	defer tick.Stop()
	for {
		lapse := time.NewTimer(time.Until(l.until()))
		select {
		case <-l.session.Done():
		case <-l.deposed:
		case <-lapse.C:
		case <-tick.C:
			lapse.Stop()
			_ = l.vouch(context.Background()) // a failure leaves validUntil to run out
			continue
		}
		lapse.Stop()
		return
	}
}

func (l *leadership) until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// LeadUntil is the time until which this process surely leads (zero: it
// does not lead). Past it another process may lead, and this one must
// hand out nothing whose safety rests on its leading: extent locks and
// cache grants, whose grace at a successor counts from its takeover.
func (e *Etcd) LeadUntil() time.Time {
	l := e.leader()
	if l == nil {
		return time.Time{}
	}
	return l.until()
}

// lockWhileAlive waits for m as Lock does, but gives up with
// ErrSessionExpired as soon as s ends: a standby whose lease ran out while
// it waited (its record gone with it) queues again on a new session at
// once, rather than when the lock is next released.
func lockWhileAlive(ctx context.Context, s *concurrency.Session, m *concurrency.Mutex) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	err := m.Lock(lctx)
	if err != nil && ctx.Err() == nil && lctx.Err() != nil {
		return concurrency.ErrSessionExpired
	}
	return err
}

// Resign gives up the lead (if this process still holds it) and forgets
// it: commits are refused (ErrNotLeader) until Lead returns again. For a
// process that lost the lead and stands by again.
func (e *Etcd) Resign() {
	e.mu.Lock()
	l := e.lead
	e.lead = nil
	e.mu.Unlock()
	if l != nil {
		_ = l.session.Close() // revokes the lease; fails harmlessly if it ran out
	}
}

// leadState is the lead a commit must hold (nil: none), whether this
// engine ever led (then a commit without the lead is refused), and
// whether it joined as one of several actives (then only AsLeader
// commits need the lead).
func (e *Etcd) leadState() (lead *leadership, led, multi bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lead, e.led, e.multi
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
	recorded, err := e.bind(ctx, e.root+"keys", fp)
	if err != nil || string(recorded) == string(fp) {
		return err
	}
	return ErrKeysDiffer
}

// ErrSettingDiffers is an MDS run with another value of a setting every
// MDS of the cluster must share.
var ErrSettingDiffers = errors.New("kv: this MDS's setting differs from the cluster's")

// BindSetting records value as the cluster's for setting name if none is
// recorded, and refuses another (ErrSettingDiffers, saying both).
func (e *Etcd) BindSetting(ctx context.Context, name, value string) error {
	recorded, err := e.bind(ctx, e.root+"settings/"+name, []byte(value))
	if err != nil || string(recorded) == value {
		return err
	}
	return fmt.Errorf("%w: --%s %s here, %s in the cluster's first MDS", ErrSettingDiffers, name, value, recorded)
}

// bind stores value at key unless the key exists, and returns what the
// key holds after.
func (e *Etcd) bind(ctx context.Context, key string, value []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
	defer cancel()
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(value))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, etcdErr(err)
	}
	if resp.Succeeded {
		return value, nil
	}
	if len(resp.Responses) != 1 || resp.Responses[0].GetResponseRange() == nil {
		return nil, fmt.Errorf("etcd: no answer to the read of %s", key)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return nil, fmt.Errorf("etcd: %s vanished", key)
	}
	return kvs[0].Value, nil
}
