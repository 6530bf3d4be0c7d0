package mds

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// A session that ends leaves the records of its last mutations; the
// sweep deletes those older than onceKeep, and only those, a batch at a
// time.
func TestSweepForgetsOldMutationRecords(t *testing.T) {
	ctx := context.Background()
	key, err := capability.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key, Now: clock, GCEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mkdir := func(session, seq uint64, name string) {
		t.Helper()
		body, err := mdsproto.Marshal(mdsproto.MkdirReq{Once: mdsproto.Once{Session: session, Seq: seq}, Path: name, Mode: 0o755})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.handle(ctx, &wire.Request{Op: mdsproto.OpMkdir, Meta: body}); err != nil {
			t.Fatal(err)
		}
	}
	records := func() int {
		n := 0
		if err := s.kv.View(ctx, func(r kv.Reader) error {
			return r.Scan([]byte{'r'}, []byte{'s'}, func(_, _ []byte) bool { n++; return true })
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	old := onceSweepBatch + 10
	for i := range old {
		mkdir(1, uint64(i+1), "/old"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)))
	}
	mu.Lock()
	now = now.Add(onceKeep + time.Minute)
	mu.Unlock()
	mkdir(2, 1, "/new")
	if got := records(); got != old+1 {
		t.Fatalf("%d records before the sweep, want %d", got, old+1)
	}
	cursor, err := s.sweepOnce(ctx, nil)
	if err != nil || cursor == nil {
		t.Fatalf("first sweep: cursor %q, %v; want it to stop after a batch", cursor, err)
	}
	if got := records(); got != old+1-onceSweepBatch {
		t.Fatalf("%d records after one batch, want %d", got, old+1-onceSweepBatch)
	}
	if cursor, err = s.sweepOnce(ctx, cursor); err != nil || cursor != nil {
		t.Fatalf("second sweep: cursor %q, %v; want the end", cursor, err)
	}
	if got := records(); got != 1 {
		t.Fatalf("%d records after the sweep, want the recent one", got)
	}
}

// BenchmarkNamedMutations: a mkdir and its remove, unnamed and named for
// exactly-once execution (a record written with each, and dropped below
// the floor): what exactly-once costs per mutation at the MDS.
func BenchmarkNamedMutations(b *testing.B) {
	for _, named := range []bool{false, true} {
		name := "unnamed"
		if named {
			name = "named"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			key, err := capability.NewKey()
			if err != nil {
				b.Fatal(err)
			}
			s, err := Start(ctx, Config{Dir: b.TempDir(), Listen: "127.0.0.1:0", Key: key})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var seq uint64
			run := func(op uint16, req interface{ SetOnce(mdsproto.Once) }) {
				if named {
					seq++
					req.SetOnce(mdsproto.Once{Session: 9, Seq: seq, Floor: seq})
				}
				body, err := mdsproto.Marshal(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.handle(ctx, &wire.Request{Op: op, Meta: body}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				run(mdsproto.OpMkdir, &mdsproto.MkdirReq{Path: "/d", Mode: 0o755})
				run(mdsproto.OpRemove, &mdsproto.PathReq{Path: "/d"})
			}
		})
	}
}
