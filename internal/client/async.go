package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
)

// The async write-sync policy (mdsproto.SyncAsync; Sigma Cluster's
// asynchronous writes). A close (or the mount's flush at close(2))
// sends the last unit writes unsynced, waits for the OSDs to take them,
// commits the size at the MDS, so another client's open sees the file
// at once (its OSDs serve the bytes from memory), and returns. The
// client's syncer makes the data durable within asyncSyncInterval: one
// SyncAll (osdproto.OpSyncAll) to each OSD that took such writes covers
// every file closed meanwhile, one request and one group fsync per OSD
// per interval where the cluster policy pays a synced write per file per
// OSD. fsync of any file, SyncData and the client's Close make it
// durable at once.
//
// A SyncAll answered by another OSD process than the one that took a
// write means the OSD restarted in between and may have lost it: the
// component is marked dirty at the MDS, which rebuilds it from the
// file's other components. The writes are not sent again: the file is
// closed, and a later writer's bytes may have replaced them since.
//
// What a crash loses: the client dying loses nothing the OSDs took (each
// OSD syncs what it took every heartbeat, osd.Server's upkeep); an OSD
// losing power loses its last interval's writes, which the syncer then
// has rebuilt from the other components; every OSD of a file losing
// power within the interval loses the file's last writes, which then
// read as an error (their components are marked), never as old bytes
// taken for new.

const (
	// asyncSyncInterval is Options.AsyncSyncInterval's default.
	asyncSyncInterval = time.Second
	// maxAsyncWrites bounds the component writes waiting for a SyncAll
	// (each holds its closed File, a few KiB, until then): past it, a
	// close syncs them before it returns.
	maxAsyncWrites = 8192
)

// asyncSyncer makes durable what files closed under the async policy
// wrote (one per client).
type asyncSyncer struct {
	c       *Client
	mu      sync.Mutex
	waiting map[uint32][]asyncWrite // OSD id → writes it took awaiting its SyncAll
	n       int                     // writes waiting, all OSDs
	armed   bool                    // a flush is scheduled
	running sync.Mutex              // one flush at a time
}

// asyncWrite is one component a flushed file wrote unsynced.
type asyncWrite struct {
	f    *File // its capability and layout reach the OSD; marks go to the MDS through it
	comp int
	boot int64 // the OSD process that took the writes; -1: several
}

func newAsyncSyncer(c *Client) *asyncSyncer {
	return &asyncSyncer{c: c, waiting: map[uint32][]asyncWrite{}}
}

// asyncPolicy reports whether f's writes follow the async policy.
func (f *File) asyncPolicy() bool {
	f.lmu.Lock()
	p := f.policy
	f.lmu.Unlock()
	if p == "" {
		p = f.c.opts.Sync
	}
	return p == mdsproto.SyncAsync
}

// flushLocked ends a flush of f at close: under the async policy the data
// becomes durable behind the caller, under cluster before it returns.
func (f *File) flushLocked(ctx context.Context) error {
	if !f.write || !f.asyncPolicy() || f.publishing() || f.missedAny() {
		// Writes to send again, or an Atomic create: as under cluster.
		return f.syncLocked(ctx)
	}
	f.flushAllLocked()
	f.pending.wait()
	if err := f.stickyErr(); err != nil {
		return err
	}
	if !f.modified {
		return nil
	}
	if err := f.checkRedundancy(); err != nil {
		return err
	}
	f.c.async.add(ctx, f)
	return f.commitLocked(ctx)
}

func (f *File) missedAny() bool {
	f.amu.Lock()
	defer f.amu.Unlock()
	return len(f.missed) > 0
}

// add takes over what f's OSDs took unsynced since its last sync; the
// caller holds f.mu and no unit write of f is in flight.
func (s *asyncSyncer) add(ctx context.Context, f *File) {
	lay := f.layout()
	u := f.dropUnsynced() // their buffers were kept to send again; never sent again once closed
	s.mu.Lock()
	for comp, boot := range u.boots {
		if comp < len(lay.OSDs) {
			id := lay.OSDs[comp]
			s.waiting[id] = append(s.waiting[id], asyncWrite{f: f, comp: comp, boot: boot})
			s.n++
		}
	}
	full := s.n >= maxAsyncWrites
	if !s.armed && !full {
		s.armed = true
		every := s.c.opts.AsyncSyncInterval
		if every <= 0 {
			every = asyncSyncInterval
		}
		time.AfterFunc(every, func() { s.flush(s.c.life) })
	}
	s.mu.Unlock()
	if full {
		s.flush(ctx)
	}
}

// flush sends a SyncAll to every OSD with writes waiting and settles
// them: durable, or their components marked dirty.
func (s *asyncSyncer) flush(ctx context.Context) {
	s.running.Lock()
	defer s.running.Unlock()
	s.mu.Lock()
	waiting := s.waiting
	s.waiting, s.n, s.armed = map[uint32][]asyncWrite{}, 0, false
	s.mu.Unlock()
	if ctx.Err() != nil {
		ctx = context.Background() // the client is closing: what waits is still made durable
	}
	ctx, cancel := context.WithTimeout(ctx, s.c.opts.IOTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, ws := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			syncOneOSD(ctx, ws)
		}()
	}
	wg.Wait()
}

// syncOneOSD sends one OSD a SyncAll, through the newest file that wrote
// to it (its capability has the longest left), and marks dirty the
// components of writes it may have lost.
func syncOneOSD(ctx context.Context, ws []asyncWrite) {
	newest := ws[len(ws)-1]
	boot, err := osdproto.BootOf(newest.f.unitCall(ctx, osdproto.OpSyncAll, newest.comp, osdproto.Req{}, nil, nil))
	for _, w := range ws {
		switch {
		case err != nil:
			_ = w.f.markDirty(ctx, fmt.Errorf("async sync failed: %w", err), w.comp)
		case w.boot != int64(boot):
			_ = w.f.markDirty(ctx, fmt.Errorf("async sync: %w", ErrOSDRestarted), w.comp)
		}
	}
}

// pendingAsync reports whether writes of closed files wait for a sync.
func (s *asyncSyncer) pendingAsync() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n > 0
}

// SyncData makes durable at once everything files closed under the
// async policy wrote (syncfs).
func (c *Client) SyncData(ctx context.Context) {
	if c.async.pendingAsync() {
		c.async.flush(ctx)
	}
}
