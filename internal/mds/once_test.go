package mds

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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

// Each mutation drops its session's records below the floor it names, so
// a session that answers in order keeps one record, however long it runs;
// a record at or above the floor stays for its retries.
func TestRecordsBelowTheFloorAreDropped(t *testing.T) {
	ctx := context.Background()
	key, err := capability.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key, GCEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seqs := func() []uint64 {
		var out []uint64
		_ = s.kv.View(ctx, func(r kv.Reader) error {
			return r.Scan(onceKey(7, 0), onceKey(8, 0), func(k, _ []byte) bool {
				out = append(out, binary.BigEndian.Uint64(k[9:]))
				return true
			})
		})
		return out
	}
	mkdir := func(seq, floor uint64) {
		t.Helper()
		body, err := mdsproto.Marshal(mdsproto.MkdirReq{Once: mdsproto.Once{Session: 7, Seq: seq, Floor: floor}, Path: fmt.Sprintf("/d%d", seq), Mode: 0o755})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.handle(ctx, &wire.Request{Op: mdsproto.OpMkdir, Meta: body}); err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(1); seq <= 3*onceFloorBatch; seq++ {
		mkdir(seq, seq)
	}
	if got := seqs(); !slices.Equal(got, []uint64{3 * onceFloorBatch}) {
		t.Fatalf("records %v after answering in order, want only the last", got)
	}
	// Three in flight: the floor stays at the first until it is answered.
	first := uint64(3*onceFloorBatch + 1)
	mkdir(first+1, first)
	mkdir(first+2, first)
	if got := seqs(); !slices.Equal(got, []uint64{first + 1, first + 2}) {
		t.Fatalf("records %v with %d unanswered, want %d and %d", got, first, first+1, first+2)
	}
	mkdir(first, first)
	mkdir(first+3, first+3)
	if got := seqs(); !slices.Equal(got, []uint64{first + 3}) {
		t.Fatalf("records %v after the floor passed them, want only %d", got, first+3)
	}
	// A floor held back by a slow mutation, then jumping past hundreds:
	// the next few mutations catch up, a batch each.
	slow := first + 4
	for seq := slow + 1; seq <= slow+4*onceFloorBatch; seq++ {
		mkdir(seq, slow)
	}
	mkdir(slow, slow)
	next := slow + 4*onceFloorBatch + 1
	for i := range uint64(5) {
		mkdir(next+i, next+i)
	}
	if got := seqs(); !slices.Equal(got, []uint64{next + 4}) {
		t.Fatalf("%d records after the floor jumped (%v...), want only %d", len(got), got[:min(len(got), 4)], next+4)
	}
}

// gateEngine holds the first update that succeeds, before its commit,
// until released.
type gateEngine struct {
	kv.Engine
	updates  atomic.Int32 // updates begun since armed
	armed    atomic.Bool
	entered  chan struct{}
	release  chan struct{}
	gateOnce sync.Once
}

func (e *gateEngine) Update(ctx context.Context, fn func(kv.Txn) error) error {
	if e.armed.Load() {
		e.updates.Add(1)
	}
	return e.Engine.Update(ctx, func(tx kv.Txn) error {
		if err := fn(tx); err != nil {
			return err
		}
		if e.armed.Load() {
			e.gateOnce.Do(func() { close(e.entered); <-e.release })
		}
		return nil
	})
}

// A retry that arrives while its first attempt is still committing (the
// client's connection dropped and it sent the request again) is answered
// with the first attempt's outcome once that commits: not applied again
// and not refused as a new request (here a mkdir, which would be EEXIST).
func TestRetryDuringItsFirstAttempt(t *testing.T) {
	ctx := context.Background()
	key := testKey(t)
	store, err := kv.OpenEmbedded(ctx, t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	eng := &gateEngine{Engine: store, entered: make(chan struct{}), release: make(chan struct{})}
	s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key, GCEvery: time.Hour, Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body, err := mdsproto.Marshal(mdsproto.MkdirReq{Once: mdsproto.Once{Session: 9, Seq: 1}, Path: "/once", Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		in  mdsproto.Inode
		err error
	}
	send := func(to chan<- answer) {
		resp, err := s.handle(ctx, &wire.Request{Op: mdsproto.OpMkdir, Meta: body})
		var a answer
		if a.err = err; err == nil {
			a.err = mdsproto.Unmarshal(resp.Meta, &a.in)
		}
		to <- a
	}
	warm, err := mdsproto.Marshal(mdsproto.MkdirReq{Path: "/warm", Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.handle(ctx, &wire.Request{Op: mdsproto.OpMkdir, Meta: warm}); err != nil {
		t.Fatal(err) // takes this process's range of inode numbers: a mkdir is then one update
	}
	eng.armed.Store(true)
	first, retry := make(chan answer, 1), make(chan answer, 1)
	go send(first)
	<-eng.entered // the first attempt is in its commit
	go send(retry)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	for eng.updates.Load() < 2 && time.Now().Before(deadline) {
		<-tick.C // the retry reaches its update (behind the first's commit)
	}
	tick.Stop()
	close(eng.release)
	a, b := <-first, <-retry
	if a.err != nil || b.err != nil || a.in.Ino == 0 || a.in.Ino != b.in.Ino {
		t.Fatalf("first attempt: %+v, %v; retry: %+v, %v; want both the same directory", a.in, a.err, b.in, b.err)
	}
}
