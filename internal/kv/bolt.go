package kv

import (
	"bytes"
	"context"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("braid")

// Bolt is the embedded B+tree engine: a commit writes the pages it
// changed and then its meta page, with an fdatasync after each. It was the
// MDS's engine before Pebble (see pebble.go); it stays for the stores it
// made (OpenEmbedded moves them to Pebble) and as a second engine the
// conformance tests hold to the same contract.
type Bolt struct {
	db *bolt.DB
	committer
}

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
	e := &Bolt{db: db}
	e.apply = e.applyGroup
	return e, nil
}

type boltTxn struct {
	b     *bolt.Bucket
	wrote bool // a Put or Delete was made
}

func (t *boltTxn) Get(key []byte) ([]byte, error) {
	v := t.b.Get(key)
	if v == nil {
		return nil, nil
	}
	return bytes.Clone(v), nil
}

func (t *boltTxn) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	c := t.b.Cursor()
	for k, v := c.Seek(start); k != nil && (end == nil || bytes.Compare(k, end) < 0); k, v = c.Next() {
		if !fn(k, v) {
			return nil
		}
	}
	return nil
}

func (t *boltTxn) Put(key, value []byte) error {
	t.wrote = true
	return t.b.Put(key, value)
}

func (t *boltTxn) Delete(key []byte) error {
	t.wrote = true
	return t.b.Delete(key)
}

func (e *Bolt) View(ctx context.Context, fn func(Reader) error) error {
	return e.db.View(func(tx *bolt.Tx) error { return fn(&boltTxn{b: tx.Bucket(bucket)}) })
}

func (e *Bolt) Update(ctx context.Context, fn func(Txn) error) error {
	fn = fenced(ctx, fn)
	return Retry(ctx, func() error { return e.run(fn) })
}

// applyGroup runs fns in one transaction (committer.apply).
func (e *Bolt) applyGroup(fns []func(Txn) error) (int, error) {
	failed := -1
	var fnErr error
	err := e.update(func(t *boltTxn) error {
		for i, fn := range fns {
			if fnErr = fn(t); fnErr != nil {
				failed = i
				return fnErr
			}
		}
		return nil
	})
	if failed >= 0 {
		return failed, fnErr
	}
	return -1, err
}

// update runs fn in a write transaction and commits it, unless fn wrote
// nothing: a commit costs two fdatasyncs even then.
func (e *Bolt) update(fn func(*boltTxn) error) error {
	tx, err := e.db.Begin(true)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	t := &boltTxn{b: tx.Bucket(bucket)}
	if err := fn(t); err != nil || !t.wrote {
		return err
	}
	committed = true
	return tx.Commit()
}

func (e *Bolt) Close() error { return e.db.Close() }
