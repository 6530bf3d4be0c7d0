package mds

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// TestStoredDeadlinesAreNeverEarly: a deadline one MDS stored (an intent's
// expiry) is read by its successor on another machine whose clock runs
// ten minutes ahead. The successor does not take it as passed until the
// intent's lifetime has passed on its own clock since it started: the
// writer's commit is still accepted, and expires after that.
func TestStoredDeadlinesAreNeverEarly(t *testing.T) {
	ctx := context.Background()
	key := testKey(t)
	dir := t.TempDir()
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	const ttl = time.Minute
	cfg := Config{Dir: dir, Listen: "127.0.0.1:0", Key: key, Now: clock, IntentTTL: ttl, ResolveEvery: time.Hour, GCEvery: time.Hour}
	first, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The first MDS stores an intent expiring a minute from its now.
	in := intentRec{Format: recFormat, State: intentPrepared, Comps: []uint32{0}, OSDs: []uint32{1}, ExpiresNs: clock().Add(ttl).UnixNano()}
	if err := first.kv.Update(ctx, func(tx kv.Txn) error { return putRecord(tx, intentKey(rootIno, 7), &in) }); err != nil {
		t.Fatal(err)
	}
	first.Close()

	advance(10 * time.Minute) // the successor's clock is ten minutes ahead
	second, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	commit := func() error {
		_, err := second.intents.commit(ctx, mdsproto.IntentReq{Ino: rootIno, Txid: 7})
		return err
	}
	advance(ttl - time.Second)
	if err := commit(); err != nil {
		t.Fatalf("commit within the intent's lifetime on the successor's clock: %v", err)
	}
	// Committed; stored again as prepared to see it expire.
	if err := second.kv.Update(ctx, func(tx kv.Txn) error { return putRecord(tx, intentKey(rootIno, 7), &in) }); err != nil {
		t.Fatal(err)
	}
	advance(time.Second)
	if err := commit(); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("commit a lifetime after the successor started: %v, want it refused as expired", err)
	}
}
