package mds_test

import (
	"context"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// cacheSession is a raw caching session at the MDS, driven by hand.
type cacheSession struct {
	t     *testing.T
	call  func(op uint16, req, resp any)
	id    uint64
	epoch uint64
	acked uint64
}

func newCacheSession(t *testing.T, c *testcluster.Cluster, id uint64) *cacheSession {
	conn, err := wire.Dial(context.Background(), c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &cacheSession{t: t, call: rawCaller(t, conn), id: id}
	if r := s.wait(0); r.Epoch == 0 {
		t.Fatal("a new session got no epoch")
	}
	return s
}

func (s *cacheSession) wait(waitNs int64) mdsproto.CacheWaitResp {
	var r mdsproto.CacheWaitResp
	s.call(mdsproto.OpCacheWait, mdsproto.CacheWaitReq{Session: s.id, Epoch: s.epoch, Acked: s.acked, WaitNs: waitNs}, &r)
	s.epoch = r.Epoch
	return r
}

func (s *cacheSession) lookup(dir uint64, name string) mdsproto.CacheLookupResp {
	var r mdsproto.CacheLookupResp
	s.call(mdsproto.OpCacheLookup, mdsproto.CacheLookupReq{Dir: dir, Name: name, Session: s.id, Epoch: s.epoch}, &r)
	return r
}

// A change to what a session caches waits for its acknowledgement, and
// the recall names the inode that changed. The session is then no longer
// registered: a second change does not wait for it.
func TestChangeWaitsForCachingSession(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	s := newCacheSession(t, c, 77)
	if r := s.lookup(braid.RootIno, "g"); r.Inode != nil || r.Grant != s.epoch {
		t.Fatalf("negative lookup: %+v (epoch %d)", r, s.epoch)
	}
	cl := c.Dial()
	done := make(chan error, 1)
	go func() {
		_, err := cl.MkdirAt(ctx, braid.RootIno, "g", 0o755, 0, 0)
		done <- err
	}()
	r := s.wait(int64(10 * time.Second))
	early := false
	select {
	case <-done:
		early = true // only if the MDS gave up on this session (it is then evicted)
	default:
	}
	if r.Epoch != s.epoch || len(r.Invalidations) == 0 {
		t.Fatalf("wait answered %+v", r)
	}
	inv := r.Invalidations[len(r.Invalidations)-1]
	if inv.Ino != braid.RootIno {
		t.Fatalf("invalidation %+v does not recall the directory", inv)
	}
	s.acked = inv.Seq
	epoch := s.epoch
	s.wait(0)
	if early && s.epoch == epoch {
		t.Fatal("the change committed before the session acknowledged it, and the session was not evicted")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MkdirAt(ctx, braid.RootIno, "g2", 0o755, 0, 0); err != nil {
		t.Fatal(err)
	}
	if r := s.wait(0); len(r.Invalidations) != 0 {
		t.Fatalf("recalled again after the recall: %+v", r.Invalidations)
	}
	if r := s.lookup(braid.RootIno, "g"); r.Inode == nil {
		t.Fatal("the new directory is not found after the acknowledgement")
	}
}

// A session that does not acknowledge loses its registrations: the change
// proceeds (after its lease), and the session's next wait starts a new
// epoch, which tells its client to drop everything.
func TestSilentCachingSessionIsEvicted(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	s := newCacheSession(t, c, 78)
	if r := s.lookup(braid.RootIno, "h"); r.Grant != s.epoch {
		t.Fatalf("negative lookup not granted: %+v", r)
	}
	cl := c.Dial()
	if _, err := cl.MkdirAt(ctx, braid.RootIno, "h", 0o755, 0, 0); err != nil {
		t.Fatalf("a change waiting for a silent session: %v", err)
	}
	epoch := s.epoch
	s.wait(0)
	if s.epoch == epoch {
		t.Fatal("the silent session kept its epoch")
	}
	// Its old epoch grants nothing.
	if r := s.lookup(braid.RootIno, "h"); r.Inode == nil || r.Grant != s.epoch {
		t.Fatalf("lookup in the new epoch: %+v", r)
	}
	var r mdsproto.CacheLookupResp
	s.call(mdsproto.OpCacheLookup, mdsproto.CacheLookupReq{Dir: braid.RootIno, Name: "h", Session: s.id, Epoch: epoch}, &r)
	if r.Grant != 0 {
		t.Fatalf("a lookup in the evicted epoch was granted: %+v", r)
	}
}
