package mds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// twoActives starts MDS processes a (leading) and b (not) on one store,
// both active, and waits until b serves by the table a planned for both.
func twoActives(t *testing.T) (a, b *Server) {
	t.Helper()
	ctx := context.Background()
	key := testKey(t)
	eng, err := kv.OpenPebble(filepath.Join(t.TempDir(), "store"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	var mu sync.Mutex
	var servers []*Server
	actives := func(context.Context) ([]mdsproto.RouteServer, error) {
		mu.Lock()
		defer mu.Unlock()
		var out []mdsproto.RouteServer
		for _, s := range servers {
			out = append(out, mdsproto.RouteServer{Name: s.cfg.Name, Addr: s.Addr()})
		}
		return out, nil
	}
	always := func() time.Time { return time.Now().Add(time.Hour) }
	never := func() time.Time { return time.Time{} }
	start := func(name string, leads func() time.Time) *Server {
		s, err := Start(ctx, Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key, Engine: keepOpenEngine{eng}, Name: name,
			ServeUntil: always, LeadUntil: leads, Actives: actives, MkdirSwitch: 1,
			WriterLease: 2 * time.Second, ResolveEvery: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		mu.Lock()
		servers = append(servers, s)
		mu.Unlock()
		return s
	}
	a = start("a", always)
	b = start("b", never)
	poll(t, func() bool {
		va, vb := a.router.routes.load(), b.router.routes.load()
		return va != nil && vb != nil && len(va.table.Servers) == 2 && vb.table.Epoch == va.table.Epoch
	}, "b never served by a table naming both")
	return a, b
}

// keepOpenEngine is an engine two servers share: closing one leaves it.
type keepOpenEngine struct{ kv.Engine }

func (keepOpenEngine) Close() error { return nil }

func poll(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(what)
		case <-tick.C:
		}
	}
}

// TestTwoActivesSplitTheFiles: two active processes split the slots
// evenly; the leader alone takes heartbeats and answers status, and the
// other adopts its OSD map; a file's lease, commit and locks are served
// only by its slot's owner (ErrMoved elsewhere), while the namespace is
// served by both; a file removed by the other process while open stays
// an orphan until its owner sees the last handle go, then is reaped.
func TestTwoActivesSplitTheFiles(t *testing.T) {
	a, b := twoActives(t)
	key := a.cfg.Key
	counts := a.router.routes.load().table.SlotsOf()
	if counts["a"] != route.SlotCount/2 || counts["b"] != route.SlotCount/2 {
		t.Fatalf("slots: %v", counts)
	}
	do := func(s *Server, op uint16, req, out any) error { return handleOp(t, s, op, req, out) }
	for i := range 3 {
		hb := mdsproto.HeartbeatReq{UUID: fmt.Sprintf("osd-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1+i), CapacityBytes: 1 << 40, FreeBytes: 1 << 40, TimeNs: time.Now().UnixNano()}
		hb.Sig = key.Sign("heartbeat", hb.SignedBytes())
		if err := do(b, mdsproto.OpHeartbeat, hb, nil); !errors.Is(err, wire.ErrNotLeader) {
			t.Fatalf("a heartbeat at the process not leading: %v, want ErrNotLeader", err)
		}
		if err := do(a, mdsproto.OpHeartbeat, hb, nil); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, func() bool { return len(b.cluster.upCandidates(time.Now())) == 3 }, "b never adopted the leader's OSD map")
	if err := do(b, mdsproto.OpStatus, struct{}{}, nil); !errors.Is(err, wire.ErrNotLeader) {
		t.Fatalf("status at the process not leading: %v", err)
	}
	var st mdsproto.StatusResp
	if err := do(a, mdsproto.OpStatus, struct{}{}, &st); err != nil || st.Meta.Routing == nil || len(st.Meta.Routing.Servers) != 2 {
		t.Fatalf("status at the leader: %v, routing %+v", err, st.Meta.Routing)
	}

	// A directory of each process's (switching spreads them by name).
	dirs := map[string]mdsproto.Inode{}
	for i := 0; len(dirs) < 2 && i < 100; i++ {
		var d mdsproto.Inode
		if err := do(b, mdsproto.OpMkdir, mdsproto.MkdirReq{Path: fmt.Sprintf("/d%d", i), Mode: 0o755}, &d); err != nil {
			t.Fatal(err)
		}
		dirs[a.router.routes.load().table.Owner(route.SlotOf(d.Ino)).Name] = d
	}
	if len(dirs) != 2 {
		t.Fatalf("100 switched directories all went to one process's slots")
	}
	owner := map[string]*Server{"a": a, "b": b}
	other := map[string]*Server{"a": b, "b": a}
	// Past both processes' start and gain graces, in which every file
	// counts as open: a remove must keep an open file for what the
	// remover knows, not for a grace.
	poll(t, func() bool {
		now := time.Now()
		for _, s := range []*Server{a, b} {
			if now.Sub(s.cluster.live.Started) < s.cfg.WriterLease || s.router.inGainGrace(now) {
				return false
			}
		}
		return true
	}, "the graces never ended")
	for name, d := range dirs {
		var ls mdsproto.ReaddirResp
		if err := do(other[name], mdsproto.OpReaddir, mdsproto.ReaddirReq{Path: "/"}, &ls); err != nil {
			t.Fatal(err)
		}
		create := mdsproto.CreateReq{Dir: d.Ino, Path: "f", Mode: 0o644, Handle: 7, SizeHint: 0}
		if err := do(other[name], mdsproto.OpCreate, create, nil); !errors.Is(err, wire.ErrMoved) {
			t.Fatalf("a create with a handle in %s's directory at the other process: %v, want ErrMoved", name, err)
		}
		var f mdsproto.OpenResp
		if err := do(owner[name], mdsproto.OpCreate, create, &f); err != nil {
			t.Fatalf("the create at its owner %s: %v", name, err)
		}
		renew := mdsproto.RenewReq{Ino: f.Inode.Ino, Handle: 7}
		if err := do(other[name], mdsproto.OpRenew, renew, nil); !errors.Is(err, wire.ErrMoved) {
			t.Fatalf("a renewal at the other process: %v, want ErrMoved", err)
		}
		if err := do(owner[name], mdsproto.OpRenew, renew, nil); err != nil {
			t.Fatal(err)
		}
		commit := mdsproto.CommitReq{Ino: f.Inode.Ino, Handle: 7, LayoutVersion: f.Inode.Layout.Version}
		if err := do(other[name], mdsproto.OpCommit, commit, nil); !errors.Is(err, wire.ErrMoved) {
			t.Fatalf("a commit at the other process: %v, want ErrMoved", err)
		}
		if err := do(owner[name], mdsproto.OpCommit, commit, nil); err != nil {
			t.Fatal(err)
		}
		// Removed by the other process while the handle holds it: kept.
		if err := do(other[name], mdsproto.OpRemove, mdsproto.PathReq{Dir: d.Ino, Path: "f"}, nil); err != nil {
			t.Fatal(err)
		}
		orphaned := func() bool {
			var in *inodeRec
			_ = a.kv.View(context.Background(), func(r kv.Reader) error {
				in, _ = getInode(r, f.Inode.Ino)
				return nil
			})
			return in != nil && in.Nlink == 0
		}
		if !orphaned() {
			t.Fatalf("a file open at %s, removed at the other process, is gone", name)
		}
		// The handle goes: its owner reaps the orphan.
		if err := do(owner[name], mdsproto.OpRenew, mdsproto.RenewReq{Ino: f.Inode.Ino, Handle: 7, Release: true}, nil); err != nil {
			t.Fatal(err)
		}
		poll(t, func() bool { return !orphaned() }, fmt.Sprintf("%s never reaped the orphan whose last handle went", name))
	}
}
