// Package kv is the transactional key-value engine interface the MDS keeps
// its state in, with its implementations: the embedded engine on Pebble
// (and bbolt's, which older stores move from), and etcd's for several MDS
// processes. The MDS is dataless (Slice): everything it knows lives here,
// so one engine can replace another without touching
// the namespace code.
package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrConflict is returned by an engine when a transaction lost a race with
// another; Update retries such transactions.
var ErrConflict = errors.New("kv: transaction conflict")

// ErrClosed is returned by an engine's calls after its Close.
var ErrClosed = errors.New("kv: engine closed")

// Retries of a conflicting transaction: at most maxTxnAttempts. With
// backoff (retryBackingOff: MDS processes contending on one etcd key),
// the second attempt runs at once (a lone lost race is over) and later
// ones after a random wait growing from firstBackoff to maxBackoff, so
// contenders spread out instead of colliding again. The embedded engines
// retry at once: their only conflicts are the simulation's injected
// ones, and a sleep there would stall the simulation's bubble, whose
// clock moves only when every goroutine waits durably.
const (
	maxTxnAttempts = 64
	firstBackoff   = 500 * time.Microsecond
	maxBackoff     = 20 * time.Millisecond
)

// ErrFenced is returned by Update when the expectation its context
// carries (WithExpect) no longer held at commit: nothing was written.
var ErrFenced = errors.New("kv: fenced: the state this change was decided under has changed")

type expectCtxKey struct{}

type expectation struct{ key, value []byte }

// WithExpect makes Updates run with ctx commit only while key holds
// value (not empty); otherwise they fail with ErrFenced and write
// nothing. An MDS process fences its changes this way by the routing
// table it served them under, without reading the table in each
// transaction (on etcd a compare, not a read).
func WithExpect(ctx context.Context, key, value []byte) context.Context {
	return context.WithValue(ctx, expectCtxKey{}, expectation{key: key, value: value})
}

func expectationOf(ctx context.Context) (expectation, bool) {
	e, ok := ctx.Value(expectCtxKey{}).(expectation)
	return e, ok && len(e.value) > 0
}

// fenced is fn checking ctx's expectation first, in its own transaction:
// how engines whose transactions read consistently (the embedded ones)
// fence.
func fenced(ctx context.Context, fn func(Txn) error) func(Txn) error {
	exp, ok := expectationOf(ctx)
	if !ok {
		return fn
	}
	return func(tx Txn) error {
		v, err := tx.Get(exp.key)
		if err != nil {
			return err
		}
		if !bytes.Equal(v, exp.value) {
			return ErrFenced
		}
		return fn(tx)
	}
}

// Reader reads inside a transaction.
type Reader interface {
	// Get returns the value of key, or nil if it is absent. The value is
	// the caller's to keep.
	Get(key []byte) ([]byte, error)
	// Scan calls fn for each key in [start, end) in ascending order until
	// fn returns false. k and v are valid only during the call.
	Scan(start, end []byte, fn func(k, v []byte) bool) error
}

// ManyGetter is a Reader that reads several keys in one request (etcd).
type ManyGetter interface {
	GetMany(keys [][]byte) ([][]byte, error)
}

// GetMany reads keys through r: in one request where r can (ManyGetter),
// else one Get each. Values are in the order of keys, nil where absent.
func GetMany(r Reader, keys [][]byte) ([][]byte, error) {
	if m, ok := r.(ManyGetter); ok {
		return m.GetMany(keys)
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		v, err := r.Get(k)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// Txn reads and writes inside a transaction.
type Txn interface {
	Reader
	Put(key, value []byte) error
	Delete(key []byte) error
}

// Engine runs transactions. fn may run more than once, so it must have no
// effects outside the transaction.
type Engine interface {
	View(ctx context.Context, fn func(Reader) error) error
	Update(ctx context.Context, fn func(Txn) error) error
	Close() error
}

// WritesLimit is how many keys one transaction of e may write, its
// guards and the engine's own keys included (0: no limit but size).
func WritesLimit(e Engine) int {
	if l, ok := e.(interface{ MaxTxnOps() int }); ok {
		return l.MaxTxnOps()
	}
	return 0
}

// Retry runs attempt until it does not fail with ErrConflict, at most
// maxTxnAttempts times, at once. Engines use it to implement Update.
func Retry(ctx context.Context, attempt func() error) error { return retry(ctx, attempt, false) }

// retryBackingOff is Retry, waiting between attempts after the second.
func retryBackingOff(ctx context.Context, attempt func() error) error {
	return retry(ctx, attempt, true)
}

func retry(ctx context.Context, attempt func() error, backoff bool) error {
	wait := firstBackoff
	var err error
	for i := 0; i < maxTxnAttempts; i++ {
		if err = attempt(); !errors.Is(err, ErrConflict) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !backoff || i == 0 {
			continue
		}
		t := time.NewTimer(wait/2 + time.Duration(rand.Int64N(int64(wait))))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, maxBackoff)
	}
	return fmt.Errorf("gave up after %d attempts: %w", maxTxnAttempts, err)
}

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}
