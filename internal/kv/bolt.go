package kv

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("braid")

// Bolt is the embedded engine: a single-file B+tree with fsync per commit.
// Updates are group-committed without waiting: the first caller commits at
// once, and callers that arrive meanwhile share the next commit (a lone
// client pays one commit per update, not a batching delay).
type Bolt struct {
	db *bolt.DB

	mu         sync.Mutex
	queue      []*pendingUpdate // waiting for the next commit
	committing bool
}

type pendingUpdate struct {
	fn   func(Txn) error
	err  error
	done chan struct{}
}

// maxGroup bounds the updates one commit carries.
const maxGroup = 256

// OpenBolt opens or creates the database file at path.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, err
	}
	return &Bolt{db: db}, nil
}

type boltTxn struct{ b *bolt.Bucket }

func (t boltTxn) Get(key []byte) ([]byte, error) {
	v := t.b.Get(key)
	if v == nil {
		return nil, nil
	}
	return bytes.Clone(v), nil
}

func (t boltTxn) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	c := t.b.Cursor()
	for k, v := c.Seek(start); k != nil && (end == nil || bytes.Compare(k, end) < 0); k, v = c.Next() {
		if !fn(k, v) {
			return nil
		}
	}
	return nil
}

func (t boltTxn) Put(key, value []byte) error { return t.b.Put(key, value) }
func (t boltTxn) Delete(key []byte) error     { return t.b.Delete(key) }

func (e *Bolt) View(ctx context.Context, fn func(Reader) error) error {
	return e.db.View(func(tx *bolt.Tx) error { return fn(boltTxn{tx.Bucket(bucket)}) })
}

func (e *Bolt) Update(ctx context.Context, fn func(Txn) error) error {
	return Retry(ctx, func() error { return e.group(fn) })
}

// group runs fn in the next commit, leading the commit if none is running.
func (e *Bolt) group(fn func(Txn) error) error {
	p := &pendingUpdate{fn: fn, done: make(chan struct{})}
	e.mu.Lock()
	e.queue = append(e.queue, p)
	if e.committing {
		e.mu.Unlock()
		<-p.done
		return p.err
	}
	e.committing = true
	for len(e.queue) > 0 {
		n := min(len(e.queue), maxGroup)
		batch := e.queue[:n:n]
		e.queue = e.queue[n:]
		e.mu.Unlock()
		e.commit(batch)
		e.mu.Lock()
	}
	e.committing = false
	e.mu.Unlock()
	<-p.done
	return p.err
}

// errFailedInGroup rolls back a group commit in which one update failed.
var errFailedInGroup = errors.New("an update in the group failed")

// commit applies batch in one transaction. An update that fails is taken
// out, the rest committed without it, and it is run alone so its error
// reflects the state it would have seen on its own (as bbolt's Batch).
func (e *Bolt) commit(batch []*pendingUpdate) {
	for len(batch) > 0 {
		failed := -1
		err := e.db.Update(func(tx *bolt.Tx) error {
			b := boltTxn{tx.Bucket(bucket)}
			for i, p := range batch {
				if err := p.fn(b); err != nil {
					failed = i
					return errFailedInGroup
				}
			}
			return nil
		})
		if failed < 0 {
			for _, p := range batch {
				p.err = err
				close(p.done)
			}
			return
		}
		p := batch[failed]
		batch = append(batch[:failed:failed], batch[failed+1:]...)
		p.err = e.db.Update(func(tx *bolt.Tx) error { return p.fn(boltTxn{tx.Bucket(bucket)}) })
		close(p.done)
	}
}

func (e *Bolt) Close() error { return e.db.Close() }
