package kv

import (
	"bytes"
	"context"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("braid")

// Bolt is the embedded engine: a single-file B+tree with fsync per commit.
// Concurrent Updates are batched into one commit (group commit).
type Bolt struct{ db *bolt.DB }

// OpenBolt opens or creates the database file at path.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	db.MaxBatchDelay = 2 * time.Millisecond
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
	return Retry(ctx, func() error {
		return e.db.Batch(func(tx *bolt.Tx) error { return fn(boltTxn{tx.Bucket(bucket)}) })
	})
}

func (e *Bolt) Close() error { return e.db.Close() }
