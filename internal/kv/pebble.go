package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Pebble is the MDS's embedded engine: CockroachDB's log-structured store.
// A commit appends one batch to the write-ahead log and fdatasyncs it once
// (bbolt's B+tree costs two fdatasyncs and about ten page writes); the
// group committer makes that one sync shared by every update that arrived
// while the previous commit ran.
//
// Transactions are serializable because one goroutine, the committer's
// leader, runs every update, reading through its batch to the store; a
// View reads a snapshot of what is durable.
type Pebble struct {
	db *pebble.DB
	committer

	// durable keeps snapshots from being taken while a commit runs:
	// Pebble makes a batch visible before its log is synced, and a
	// reader must not see what a crash could still take back.
	durable sync.RWMutex

	// Pebble panics when used after Close, so Close waits for the calls
	// in progress and later ones get ErrClosed.
	mu       sync.Mutex
	idle     sync.Cond // signalled when inflight drops to 0 after Close
	inflight int
	closed   bool
}

// pebbleCacheBytes bounds the block cache (the memtables come on top).
const pebbleCacheBytes = 64 << 20

// OpenPebble opens or creates the store in directory dir.
func OpenPebble(dir string, log *slog.Logger) (*Pebble, error) {
	cache := pebble.NewCache(pebbleCacheBytes)
	defer cache.Unref()
	db, err := pebble.Open(dir, &pebble.Options{Cache: cache, Logger: pebbleLogger{log}})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	e := &Pebble{db: db}
	e.apply = e.applyGroup
	e.idle.L = &e.mu
	return e, nil
}

// enter counts a call in, or refuses it once Close began.
func (e *Pebble) enter() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	e.inflight++
	return nil
}

func (e *Pebble) leave() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight--; e.inflight == 0 && e.closed {
		e.idle.Broadcast()
	}
}

func (e *Pebble) View(ctx context.Context, fn func(Reader) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	e.durable.RLock()
	snap := e.db.NewSnapshot()
	e.durable.RUnlock()
	defer snap.Close()
	return fn(pebbleReader{snap})
}

func (e *Pebble) Update(ctx context.Context, fn func(Txn) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.leave()
	fn = fenced(ctx, fn)
	return Retry(ctx, func() error { return e.run(fn) })
}

// applyGroup runs fns in one batch (committer.apply) and commits it with
// one sync, unless nothing was written.
func (e *Pebble) applyGroup(fns []func(Txn) error) (int, error) {
	b := e.db.NewIndexedBatch()
	defer b.Close()
	t := &pebbleTxn{pebbleReader: pebbleReader{b}, b: b}
	for i, fn := range fns {
		if err := fn(t); err != nil {
			return i, err
		}
	}
	if b.Empty() {
		return -1, nil
	}
	e.durable.Lock()
	defer e.durable.Unlock()
	return -1, b.Commit(pebble.Sync)
}

// Close waits for the calls in progress and closes the store.
func (e *Pebble) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.closed = true
	for e.inflight > 0 {
		e.idle.Wait()
	}
	e.mu.Unlock()
	return e.db.Close()
}

// pebbleSource is what a reader reads: a snapshot or an indexed batch.
type pebbleSource interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

type pebbleReader struct{ src pebbleSource }

func (r pebbleReader) Get(key []byte) ([]byte, error) {
	v, closer, err := r.src.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return bytes.Clone(v), nil
}

func (r pebbleReader) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	it, err := r.src.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	return it.Close()
}

type pebbleTxn struct {
	pebbleReader
	b *pebble.Batch
}

func (t *pebbleTxn) Put(key, value []byte) error { return t.b.Set(key, value, nil) }
func (t *pebbleTxn) Delete(key []byte) error     { return t.b.Delete(key, nil) }

// pebbleLogger sends Pebble's messages to the server's log. Fatalf, which
// Pebble calls when it cannot go on safely (a failed sync of its log among
// them), stops the process as Pebble's own logger would.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error("pebble: " + fmt.Sprintf(format, args...))
	pebble.DefaultLogger.Fatalf(format, args...)
}
