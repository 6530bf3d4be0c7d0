package mds

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// TestResolverTakesAnIntentBeforeAborting: the resolver takes a
// prepared intent in a transaction before it aborts any stage, and a
// commit arriving after (on the clock of a process that thinks it has
// not expired) is refused; a committed intent is rolled forward, not
// taken; one gone is left.
func TestResolverTakesAnIntentBeforeAborting(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: testKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(txid uint64, state string) {
		rec := intentRec{Format: recFormat, State: state, Version: 1, ExpiresNs: time.Now().Add(time.Hour).UnixNano()}
		if err := s.kv.Update(ctx, func(tx kv.Txn) error { return putRecord(tx, intentKey(7, txid), &rec) }); err != nil {
			t.Fatal(err)
		}
	}
	put(1, intentPrepared)
	put(2, intentCommitted)
	if committed, gone, err := s.intents.take(ctx, intentKey(7, 1)); err != nil || committed || gone {
		t.Fatalf("taking a prepared intent: committed %v, gone %v, %v", committed, gone, err)
	}
	if err := handleOp(t, s, mdsproto.OpIntentCommit, mdsproto.IntentReq{Ino: 7, Txid: 1}, nil); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("a commit of a taken intent, not expired on the committer's clock: %v, want refused", err)
	}
	if committed, _, err := s.intents.take(ctx, intentKey(7, 2)); err != nil || !committed {
		t.Fatalf("taking a committed intent: committed %v, %v", committed, err)
	}
	if _, gone, err := s.intents.take(ctx, intentKey(7, 3)); err != nil || !gone {
		t.Fatalf("taking no intent: gone %v, %v", gone, err)
	}
	// Without the take, the same commit goes through.
	put(4, intentPrepared)
	if err := handleOp(t, s, mdsproto.OpIntentCommit, mdsproto.IntentReq{Ino: 7, Txid: 4}, nil); err != nil {
		t.Fatalf("a commit of an intent not taken: %v", err)
	}
}

// TestResolverKeepsWhatItTook: an expired intent whose OSDs are down is
// taken, its units wait, and the record written back says so (not the
// state the resolver's scan read), so a late commit is still refused and
// the next pass goes on rolling it back.
func TestResolverKeepsWhatItTook(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: testKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := &inodeRec{Inode: mdsproto.Inode{Ino: 7, Type: mdsproto.TypeFile, Mode: 0o644, Nlink: 1,
		Layout: &mdsproto.Layout{Spec: "mirror:2", Groups: 1, OSDs: []uint32{1, 2}, Version: 1}}}
	scanned := intentRec{Format: recFormat, State: intentPrepared, Version: 1, Comps: []uint32{0, 1}, OSDs: []uint32{1, 2},
		ExpiresNs: time.Now().Add(-time.Minute).UnixNano()}
	if err := s.kv.Update(ctx, func(tx kv.Txn) error {
		if err := putInode(tx, in); err != nil {
			return err
		}
		return putRecord(tx, intentKey(7, 1), &scanned)
	}); err != nil {
		t.Fatal(err)
	}
	down := map[uint32]cluster.View{1: {State: mdsproto.StateDown}, 2: {State: mdsproto.StateDown}}
	if err := s.intents.resolve(ctx, intentItem{ino: 7, txid: 1, rec: scanned}, down, time.Now()); err != nil {
		t.Fatal(err)
	}
	var after intentRec
	if err := s.kv.View(ctx, func(r kv.Reader) error { _, err := getRecord(r, intentKey(7, 1), &after); return err }); err != nil {
		t.Fatal(err)
	}
	if after.State != intentResolving || len(after.Comps) != 2 {
		t.Fatalf("intent after a pass with its OSDs down: %+v, want resolving with both units waiting", after)
	}
	if err := handleOp(t, s, mdsproto.OpIntentCommit, mdsproto.IntentReq{Ino: 7, Txid: 1}, nil); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("a late commit after the resolver's pass: %v, want refused", err)
	}
}
