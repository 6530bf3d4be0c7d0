package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// CreateOptions choose how a new file is made.
type CreateOptions struct {
	Layout    string // layout spec; "" inherits the directory's default
	SizeHint  int64  // expected size, or -1 if unknown; files under 64 KiB are mirrored
	Exclusive bool   // fail if the name exists instead of replacing it
	Mode      uint32 // permission bits; Create takes 0 as 0644, CreateAt as given
	Uid, Gid  uint32 // owner
	// Atomic creates the file without a name and gives it the name (in
	// place of any file there) only when Close succeeds: readers see the
	// old file or the whole new one, and a failed or abandoned create
	// leaves nothing behind (its objects are freed).
	Atomic bool
}

// File is an open braid file. Writes are buffered into whole stripes and
// sent to the OSDs behind the caller (write-behind); Sync and Close wait
// until every OSD has the data on disk and record the size at the MDS.
// Its methods are safe for concurrent use.
type File struct {
	c     *Client
	path  string
	write bool

	// lmu guards the layout state. It is never held while waiting for I/O,
	// so asynchronous unit writes can always take it.
	lmu sync.Mutex
	ino uint64
	lay layout.Layout
	cap capability.Cap
	eps map[uint32]mdsproto.Endpoint
	ext []int64 // per group, how far objects hold written data (the MDS's record)
	// extGen is the size generation ext is of: a record of an older one
	// (an open answered before another handle's cut) never replaces it.
	extGen uint64
	// capRenewAt is when the lease loop replaces the capability, two
	// thirds into its life (renewCapIfDue).
	capRenewAt time.Time

	mu        ioMutex      // guards the handle state below; held across writes (and I/O)
	size      int64        // set with setSizeLocked
	committed int64        // size as of open or the last commit: bytes below it are acknowledged
	sizeGen   uint64       // the size generation size is of (mdsproto.Inode.SizeGen)
	sizeSeen  atomic.Int64 // size, for Size without mu
	wb        *stripeBuf   // stripe being filled by sequential writes
	modified  bool
	closed    bool
	// syncWrites: the flush under way sends its unit writes synced
	// (osdproto.FlagSync), so the sync that follows needs no request of
	// its own (unsynced.go).
	syncWrites bool
	// leaseReleased: the last commit released the lease (Close's, with
	// CommitReq.Release), so Close sends no release of its own.
	leaseReleased bool
	enc           Encoder
	// timesKept: the file's times were set since its last write
	// (KeepTimes): the next commit leaves its mtime as the MDS has it.
	timesKept bool
	// policy is the file's write-sync policy as its MDS says
	// (mdsproto.OpenResp.Sync); "": the client's (async.go).
	policy string

	// isSealed: the file is encrypted (sealed.go), its blocks packed into
	// units of sealUnit bytes; sio is nil if the MDS gave this handle no
	// key.
	isSealed bool
	sealUnit int64
	sio      *sealedIO

	pf       prefetcher      // sequential read-ahead (read-only handles)
	pending  *pendingStripes // stripe writes in flight
	inflight *semaphore.Weighted

	// handle names this writer's lease on the file at the MDS; the lease
	// is renewed until Close. If the client dies the lease runs out and
	// the MDS scrubs the file for stripes the writer left half-written.
	handle    uint64
	attr      mdsproto.Inode    // attributes as of the open or this handle's last commit (under mu)
	publish   *mdsproto.Publish // an Atomic create's name, given by the commit at Close (under mu)
	stopLease chan struct{}
	// parked are the extents written to stripes left partly written,
	// gathered until they are flushed (gather.go; under mu), oldest first
	// in parkOrder (with entries already sent), parkedBytes in all, at
	// most parkLimit.
	parked      map[int64]*gathered
	parkOrder   []*gathered
	parkedBytes int64
	parkLimit   int64
	leaseDone   chan struct{}

	amu       sync.Mutex   // guards results of asynchronous writes
	err       error        // first write failure; sticky
	dirty     map[int]bool // components that missed writes
	reporting map[int]int  // components whose dirty mark is on its way to the MDS
	// own are the components this handle marked since its last commit.
	// A repair meanwhile rebuilds only what the MDS knows was written,
	// not this handle's writes since, so these marks outlive a new layout
	// until a commit has carried them (with the extents they concern).
	own map[int]bool
	// missed are components this handle marked dirty only because its own
	// unit writes to them failed, since its OSDs were last flushed; it
	// keeps those writes, flushOSDs sends them again, and a component
	// whose writes all land is caught up: the next commit asks the MDS to
	// clear its mark (unsynced.go).
	missed    map[int]bool
	caughtUp  map[int]bool
	unsynced  unsyncedWrites // unit writes not yet synced on their OSDs (unsynced.go)
	wrote     []int64        // per group, how far writes since the last commit reached (nil: none)
	cut       bool           // objects were cut to wrote (a truncation) since the last commit
	scrubOnce sync.Once      // a reader met a corrupt block: the file is queued for a scrub once

	locks fileLocks // extent locks this handle holds (lock.go)

	// replayWanted: a read met an OSD that restarted since it took
	// unsynced writes of this handle; they are sent again before a retry.
	replayWanted atomic.Bool
}

// Create makes (or replaces) the file at p and opens it for writing.
func (c *Client) Create(ctx context.Context, p string, o CreateOptions) (*File, error) {
	if o.Layout != "" {
		if _, err := layout.Parse(o.Layout); err != nil {
			return nil, err
		}
	}
	if o.Mode == 0 {
		o.Mode = 0o644
	}
	var r mdsproto.OpenResp
	h, sent := newHandle(), time.Now()
	err := c.mutate(ctx, mdsproto.OpCreate, &mdsproto.CreateReq{Path: p, Mode: o.Mode, Layout: o.Layout,
		SizeHint: o.SizeHint, Exclusive: o.Exclusive, Uid: o.Uid, Gid: o.Gid, Handle: h, Session: c.locks.id, Unlinked: o.Atomic}, &r)
	if err != nil {
		return nil, err
	}
	f, err := c.newFile(p, true, h, r, sent)
	if err == nil && o.Atomic {
		f.publish = &mdsproto.Publish{Path: p, Exclusive: o.Exclusive}
		f.modified = true // Close commits (and names the file) even if nothing was written
	}
	return f, err
}

// Open opens the file at p for reading.
func (c *Client) Open(ctx context.Context, p string) (*File, error) { return c.OpenFile(ctx, p, false) }

// OpenFile opens the existing file at p, for writing too if write is set.
func (c *Client) OpenFile(ctx context.Context, p string, write bool) (*File, error) {
	var r mdsproto.OpenResp
	h, sent := newHandle(), time.Now()
	if err := c.mdsWaitBusy(ctx, mdsproto.OpOpen, mdsproto.OpenReq{Path: p, Write: write, Handle: h, Session: c.writerSession(write)}, &r); err != nil {
		return nil, err
	}
	return c.newFile(p, write, h, r, sent)
}

// newHandle names an open handle for its lease at the MDS.
func newHandle() uint64 { return mrand.Uint64() | 1 }

// writerSession is the lock session an open names: a writer's asks for
// the whole file's extent lock with the open.
func (c *Client) writerSession(write bool) uint64 {
	if write {
		return c.locks.id
	}
	return 0
}

// newFile makes the handle for an open or create sent at sent.
func (c *Client) newFile(p string, write bool, handle uint64, r mdsproto.OpenResp, sent time.Time) (*File, error) {
	f := &File{c: c, path: p, write: write, dirty: map[int]bool{}, reporting: map[int]int{}, own: map[int]bool{},
		missed: map[int]bool{}, caughtUp: map[int]bool{}, unsynced: newUnsynced(),
		size: r.Inode.Stored(), committed: r.Inode.Stored(), sizeGen: r.Inode.SizeGen, handle: handle, attr: r.Inode,
		pending: newPendingStripes()}
	f.sizeSeen.Store(f.size)
	f.initLocks()
	if err := f.apply(r); err != nil {
		return nil, err
	}
	if f.isSealed = r.Inode.Sealed; f.isSealed {
		if !f.lay.Spec.Sealed {
			return nil, wire.Errorf(wire.ErrProtocol, "%s: the MDS calls it encrypted, and its layout %s is not", p, f.lay.Spec)
		}
		f.sealUnit = f.lay.Spec.UnitBytes
		if r.DataKey != nil {
			sio, err := newSealedIO(r.DataKey)
			if err != nil {
				return nil, err
			}
			f.sio = sio
		}
	}
	if write && r.Lock != nil {
		f.takeGrant(r.Lock, sent) // with the size it hands over: the inode above may predate it
	}
	enc, err := c.NewEncoder(f.lay.Spec)
	if err != nil {
		return nil, err
	}
	f.enc = enc
	stripe := int64(f.lay.Spec.Width()) * f.lay.Spec.UnitBytes
	budget := max(c.opts.MaxInflightBytes, 2*stripe)
	f.inflight = semaphore.NewWeighted(budget)
	f.parkLimit = budget - 2*stripeBufBytes(f.lay.Spec) // room for two stripes on their way
	f.startLease(c.life, time.Duration(r.LeaseNs))
	return f, nil
}

// startLease keeps renewing the lease the open took, for as long as the
// MDS says it lasts (it counts the handle as open until Close), with the
// client's other leases (renew.go), and the capability before it expires.
func (f *File) startLease(ctx context.Context, lease time.Duration) {
	if lease <= 0 {
		return // an MDS that gives no leases
	}
	f.c.renewer.add(mdsproto.LeaseRef{Ino: f.layoutIno(), Handle: f.handle, Read: !f.write}, max(lease/3, 10*time.Millisecond))
	f.stopLease, f.leaseDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(f.leaseDone)
		for {
			f.lmu.Lock()
			wake := time.Until(f.capRenewAt)
			f.lmu.Unlock()
			t := time.NewTimer(max(wake, 10*time.Millisecond))
			select {
			case <-f.stopLease:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			f.renewCapIfDue(ctx)
		}
	}()
}

// stopRenewing ends the lease's renewals: none is on its way once it
// returns.
func (f *File) stopRenewing() {
	f.c.renewer.remove(f.handle)
	close(f.stopLease)
	<-f.leaseDone
	f.stopLease = nil
}

// endLease stops renewing and releases the lease.
func (f *File) endLease(ctx context.Context, uncommitted []int64) {
	if f.leaseReleased {
		// Released by the last commit, with its extent locks.
		f.locks.left.Store(true)
		f.lockSession().leave(f)
		f.locks.mu.Lock()
		f.locks.held = nil
		f.locks.mu.Unlock()
		return
	}
	if f.stopLease == nil {
		if f.write {
			f.releaseLocks(ctx) // an MDS that gives no leases: nothing else drops them
		}
		return
	}
	f.stopRenewing()
	req := mdsproto.RenewReq{Ino: f.layoutIno(), Handle: f.handle, Release: true, Read: !f.write, Uncommitted: uncommitted}
	if f.write {
		f.locks.left.Store(true)
		f.lockSession().leave(f)                     // the release drops its extent locks at the MDS
		_ = f.c.mds(ctx, mdsproto.OpRenew, req, nil) // a writer's lease running out would get the file scrubbed
		return
	}
	// A reader's lost release only lets the lease run out; it is sent
	// behind the caller, for no longer than the client lives.
	f.c.notify(mdsproto.OpRenew, req)
}

// apply installs an MDS open response (first open or refresh).
func (f *File) apply(r mdsproto.OpenResp) error {
	if r.Inode.Layout == nil {
		return fmt.Errorf("%w: %s has no layout", wire.ErrIsDir, f.path)
	}
	l, err := r.Inode.Layout.Decode()
	if err != nil {
		return fmt.Errorf("%w: layout from MDS: %v", wire.ErrInternal, err)
	}
	c, err := capability.Decode(r.Cap)
	if err != nil {
		return fmt.Errorf("%w: capability from MDS: %v", wire.ErrInternal, err)
	}
	now := time.Now()
	f.lmu.Lock()
	if f.ino != 0 && (r.Inode.Sealed != f.isSealed || r.Inode.Sealed && l.Spec.UnitBytes != f.sealUnit) {
		// Re-placed while empty (braid layout set) with encryption
		// switched: what this handle buffers is of the old kind.
		f.lmu.Unlock()
		return wire.Errorf(wire.ErrStale, "%s: the file's layout changed to %s while open", f.path, l.Spec)
	}
	sameLayout := f.lay.Version == l.Version && f.lay.OSDs != nil
	f.ino, f.lay, f.cap, f.eps = r.Inode.Ino, l, c, r.Endpoints
	f.policy = r.Sync
	switch {
	case f.ext == nil || r.Inode.SizeGen > f.extGen:
		f.ext, f.extGen = r.Inode.Extents, r.Inode.SizeGen
	case r.Inode.SizeGen == f.extGen:
		f.ext = raiseExtents(f.ext, r.Inode.Extents)
	}
	f.capRenewAt = now.Add(time.Unix(0, c.Expiry).Sub(now) * 2 / 3)
	f.lmu.Unlock()
	// The MDS's dirty set is the truth for a new layout (only a repair,
	// which bumps the version, clears marks). Under the same layout a
	// reply may predate a mark this handle just made, so marks are merged.
	f.amu.Lock()
	if !sameLayout {
		f.dirty = map[int]bool{}
	}
	f.takeMarksLocked(r.Inode.Dirty, r.OwnDirty)
	for c := range f.reporting {
		f.dirty[c] = true
	}
	for c := range f.own {
		f.dirty[c] = true
	}
	f.amu.Unlock()
	return nil
}

// refresh fetches a new capability and layout after an OSD refused ours
// (expired, or the layout moved on).
func (f *File) refresh(ctx context.Context, seen capability.Cap) error {
	return f.refetch(ctx, seen, f.c.mdsWaitBusy)
}

// refetch asks the MDS for the file's layout and a new capability unless
// another goroutine replaced seen already; call is how (waiting out a
// repair, or not).
func (f *File) refetch(ctx context.Context, seen capability.Cap, call func(context.Context, uint16, any, any) error) error {
	f.lmu.Lock()
	cur, ino := f.cap, f.ino
	f.lmu.Unlock()
	if cur != seen { // another goroutine refreshed already
		return nil
	}
	var r mdsproto.OpenResp
	if err := call(ctx, mdsproto.OpOpen, mdsproto.OpenReq{Ino: ino, Write: f.write, Handle: f.handle}, &r); err != nil {
		return err
	}
	return f.apply(r)
}

// renewCapIfDue replaces the capability once two thirds of its life are
// gone, so a handle open for hours never meets an expired one on the
// data path. A file under repair is left for the next turn (writers
// cannot open it meanwhile; the lease must not wait on it).
func (f *File) renewCapIfDue(ctx context.Context) {
	f.lmu.Lock()
	cur, due := f.cap, !time.Now().Before(f.capRenewAt)
	f.lmu.Unlock()
	if due && f.refetch(ctx, cur, f.c.mds) != nil {
		// Busy (a repair) or unreachable: try again later, not at once.
		f.lmu.Lock()
		if f.cap == cur {
			f.capRenewAt = time.Now().Add(max(time.Until(time.Unix(0, cur.Expiry))/4, 100*time.Millisecond))
		}
		f.lmu.Unlock()
	}
}

// maxCapRenewals bounds how often one request is sent again with a fresh
// capability after an OSD refused the one it carried.
const maxCapRenewals = 3

// maxConnRetries bounds how often one OSD request is sent again on a new
// connection after its connection broke.
const maxConnRetries = 2

// Name is the path the file was opened with.
func (f *File) Name() string { return f.path }

// storedSize is the file's stored size as this handle sees it (a sealed
// file's ciphertext's). It does not wait for the handle's lock, which a
// flush holds for as long as it reads and sends (a mount's lookups and
// getattr ask for a writer's size).
func (f *File) storedSize() int64 { return f.sizeSeen.Load() }

// setSizeLocked sets the handle's view of the size (under mu), and
// publishes it for Size.
func (f *File) setSizeLocked(n int64) {
	f.size = n
	f.sizeSeen.Store(n)
}

// Spec is the file's layout spec.
func (f *File) Spec() string { return f.layout().Spec.String() }

func (f *File) layoutIno() uint64 {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	return f.ino
}

// layout returns the current layout (its OSD slice is never mutated).
func (f *File) layout() layout.Layout {
	f.lmu.Lock()
	defer f.lmu.Unlock()
	return f.lay
}

// IsConnError reports whether err is a broken or refused connection: the
// request may not have arrived, and another attempt may succeed.
func IsConnError(err error) bool {
	var ne net.Error
	return errors.Is(err, wire.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &ne) || errors.Is(err, syscall.EPIPE)
}

// unitCall sends one request for component comp to the OSD holding it,
// refreshing the capability once if the OSD refuses it.
func (f *File) unitCall(ctx context.Context, op uint16, comp int, req osdproto.Req, data, resp []byte) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		f.lmu.Lock()
		if comp >= len(f.lay.OSDs) { // the layout was replaced under us
			f.lmu.Unlock()
			return nil, wire.Errorf(wire.ErrStale, "%s: component %d not in the file's current layout", f.path, comp)
		}
		id := f.lay.OSDs[comp]
		ep, known := f.eps[id]
		req.Cap, req.Ino, req.Comp = f.cap, f.ino, uint32(comp)
		f.lmu.Unlock()
		if !known || !ep.Up {
			return nil, wire.Errorf(wire.ErrUnavail, "OSD %d (component %d) is down", id, comp)
		}
		meta, err := f.callOSD(ctx, ep.Addr, op, req, [][]byte{data}, resp)
		if err == nil {
			return meta, nil
		}
		if attempt < maxCapRenewals && (errors.Is(err, wire.ErrDenied) || errors.Is(err, wire.ErrStale)) {
			if rerr := f.refresh(ctx, req.Cap); rerr != nil {
				return nil, rerr
			}
			continue
		}
		return nil, fmt.Errorf("OSD %d (%s) component %d: %w", id, ep.Addr, comp, err)
	}
}

// callOSD sends one request to the OSD at addr, its data in pieces sent
// one after another (a staged write's, vectored: not joined first).
func (f *File) callOSD(ctx context.Context, addr string, op uint16, req osdproto.Req, data [][]byte, resp []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, f.c.opts.IOTimeout)
	defer cancel()
	var meta []byte
	var n int
	for attempt := 0; ; attempt++ {
		conn, err := f.c.conns.Get(ctx, addr)
		if err != nil {
			return nil, err
		}
		meta, n, err = conn.CallV(ctx, op, req.Encode(op), data, resp)
		// A connection the OSD closed (it restarted, or the network cut
		// it) is no verdict on the OSD: a few retries, each on a new
		// connection that fences the ones before (wire/fence.go), so
		// a copy of the request still in the network never lands after
		// the retry (every OSD request may run more than once).
		if attempt < maxConnRetries && errors.Is(err, wire.ErrClosed) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	if n != len(resp) {
		return nil, wire.Errorf(wire.ErrInternal, "short read: %d of %d bytes", n, len(resp))
	}
	return meta, nil
}

func (f *File) setErr(err error) {
	f.amu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.amu.Unlock()
}

func (f *File) stickyErr() error {
	f.amu.Lock()
	defer f.amu.Unlock()
	return f.err
}

// Sync makes everything written so far durable on the OSDs and records the
// size at the MDS. A component whose OSD could not be reached is recorded
// as dirty (read by reconstruction) as long as every parity group keeps
// enough components; otherwise Sync fails.
func (f *File) Sync() error {
	f.awaitLocks()
	f.mu.Lock()
	err := f.syncLocked(context.Background())
	f.mu.Unlock()
	if err == nil && f.write {
		// Earlier closes of the file may have left writes to make
		// durable (the async policy).
		f.c.SyncData(context.Background())
	}
	return err
}

// KeepTimes says the file's times were just set (utimensat after the
// last write, as tar does before close): the commits that follow leave
// its modification time as set, until the next write.
func (f *File) KeepTimes() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timesKept = true
}

// Flush makes what was written visible to other clients, as Close does,
// and keeps the file open: under the cluster policy durable on return,
// under async within asyncSyncInterval (async.go).
func (f *File) Flush() error {
	f.awaitLocks()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.flushLocked(context.Background())
}

func (f *File) syncLocked(ctx context.Context) error {
	if !f.write {
		return nil
	}
	f.syncWrites = f.nothingUnsynced()
	f.flushAllLocked()
	f.syncWrites = false
	f.pending.wait()
	if err := f.stickyErr(); err != nil {
		return err
	}
	if !f.modified && !f.publishing() {
		return nil // nothing written since the last commit: nothing to make durable
	}
	f.flushOSDs(ctx)
	if err := f.checkRedundancy(); err != nil {
		return err
	}
	return f.commitLocked(ctx)
}

// checkRedundancy fails if some parity group lost more components than the
// layout tolerates: then acknowledged data would not be recoverable.
func (f *File) checkRedundancy() error {
	lay := f.layout()
	f.amu.Lock()
	defer f.amu.Unlock()
	w := lay.Spec.Width()
	for g := 0; g < lay.Groups; g++ {
		var lost []int
		for c := g * w; c < (g+1)*w; c++ {
			if f.dirty[c] {
				lost = append(lost, c)
			}
		}
		if len(lost) > lay.Spec.Tolerates() {
			err := wire.Errorf(wire.ErrUnavail, "%s: parity group %d lost components %v, layout %s tolerates %d",
				f.path, g, lost, lay.Spec, lay.Spec.Tolerates())
			if f.err == nil {
				f.err = err
			}
			return err
		}
	}
	return nil
}

func (f *File) commitLocked(ctx context.Context) error {
	version, ino := f.layout().Version, f.layoutIno()
	f.amu.Lock()
	var dirty []uint32
	for c := range f.dirty {
		dirty = append(dirty, uint32(c))
	}
	slices.Sort(dirty)
	sent := maps.Clone(f.own)
	mtime := time.Now().UnixNano()
	if f.timesKept {
		mtime = 0 // set since the last write (utimensat): kept
	}
	req := mdsproto.CommitReq{Ino: ino, Size: f.size, MtimeNs: mtime, Dirty: dirty,
		LayoutVersion: version, Extents: slices.Clone(f.wrote), Cut: f.cut, SizeGen: f.sizeGen, Handle: f.handle,
		Missed: sortedComps(f.missed), CaughtUp: sortedComps(f.caughtUp)}
	f.amu.Unlock()
	if f.closed {
		req.Publish = f.publish // the last commit names an Atomic create
		if f.stopLease != nil {
			// Close's commit ends the lease too: one request, not two.
			// Renewals stop first, or one could take the lease again.
			req.Release = true
			f.stopRenewing()
		}
	}
	var in mdsproto.Inode
	err := f.c.mds(ctx, mdsproto.OpCommit, req, &in)
	if err == nil {
		f.leaseReleased = req.Release
		f.modified = false
		switch {
		case in.SizeGen > f.sizeGen: // this commit truncated, or another handle did since this one looked
			f.setSizeLocked(in.Stored())
			f.sizeGen = in.SizeGen
		case in.SizeGen == f.sizeGen:
			f.setSizeLocked(max(f.size, in.Stored())) // other writers' commits
		}
		f.committed = f.size
		f.attr = in
		f.amu.Lock()
		f.wrote, f.cut = nil, false
		for c := range sent {
			delete(f.own, c)
		}
		for _, c := range req.CaughtUp {
			delete(f.caughtUp, int(c))
			if slices.Contains(in.Dirty, c) { // marked by someone else too: rebuilt
				f.dirty[int(c)] = true
			}
		}
		f.amu.Unlock()
		f.lmu.Lock()
		if in.SizeGen >= f.extGen {
			f.ext, f.extGen = in.Extents, in.SizeGen
		}
		f.lmu.Unlock()
	}
	return err
}

// noteWritten records that component comp's object now holds written
// data up to end (object bytes), for the extents the next commit records.
func (f *File) noteWritten(comp int, end int64) {
	lay := f.layout()
	f.amu.Lock()
	defer f.amu.Unlock()
	if f.wrote == nil {
		f.wrote = make([]int64, lay.Groups)
	}
	if g := comp / lay.Spec.Width(); g < len(f.wrote) {
		f.wrote[g] = max(f.wrote[g], end)
	}
}

// wroteSoFar is, per group, how far this handle's writes reached.
func (f *File) wroteSoFar() []int64 {
	f.amu.Lock()
	defer f.amu.Unlock()
	return slices.Clone(f.wrote)
}

// publishing reports whether the next commit names an Atomic create: the
// one Close makes.
func (f *File) publishing() bool { return f.closed && f.publish != nil }

// Close flushes and syncs a file opened for writing, then releases it.
// An Atomic create gets its name here, if everything succeeded.
func (f *File) Close() error {
	return f.close(false)
}

// Abort releases the file without committing what was written since the
// last Sync. An Atomic create never gets its name: it is deleted with its
// objects. Use it when the data being written turned out bad (the source
// failed); Close after Abort does nothing.
func (f *File) Abort() error {
	return f.close(true)
}

func (f *File) close(abort bool) error {
	f.awaitLocks()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	var err error
	switch {
	case abort && f.write:
		f.dropBuffersLocked() // buffered, never sent: dropped
		if f.modified && f.publish == nil {
			// Writes since the last commit reached the OSDs: like a failed
			// writer, leave the lease to run out so the file is scrubbed.
			err = errAborted
		}
	case f.write && (f.modified || f.wb != nil || f.publishing()):
		err = f.flushLocked(context.Background())
	}
	f.pending.wait()
	f.dropBuffersLocked()
	f.pf.invalidate()
	if errors.Is(err, errAborted) {
		err = nil
		f.stopLeaseRenewals()
	} else if err == nil || f.publish != nil {
		// An Atomic create that failed is released too: it has no name,
		// so the MDS deletes it and frees its objects, counting the
		// space its uncommitted writes hold meanwhile.
		var uncommitted []int64
		if f.publish != nil && (abort || err != nil) {
			uncommitted = f.wroteSoFar()
		}
		f.endLease(context.Background(), uncommitted)
	} else {
		// Leave the lease to run out: the MDS then scrubs what this
		// failed writer may have left half-written.
		f.stopLeaseRenewals()
	}
	return err
}

// errAborted marks an Abort whose writes reached the OSDs uncommitted.
var errAborted = errors.New("aborted with uncommitted writes")

// stopLeaseRenewals stops renewing the lease without releasing it. The
// extent locks go back all the same: a lease left to run out must not
// keep other writers waiting.
func (f *File) stopLeaseRenewals() {
	if f.write {
		f.releaseLocks(context.Background())
	}
	if f.stopLease != nil {
		f.stopRenewing()
	}
}
