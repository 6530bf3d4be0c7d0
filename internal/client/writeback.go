package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Write-back of names (mdsproto/claim.go; Ceph's asynchronous directory
// operations). A client that caches metadata claims each directory it
// makes, while it is empty; while it holds the claim, no one else reads
// or changes the directory, so the client knows every name in it and
// answers creates of empty files and unlinks in it from memory, with
// inode numbers from the claim's range, and sends them to the MDS in
// batches, one transaction each. So a create or unlink is acknowledged
// before it is durable, as a local file system acknowledges it before
// its journal commits: fsync of the directory (SyncDir), of a file
// created in it (Settle), or syncfs (SyncNames) returns once it is.
// Anyone else's access to the directory recalls the claim; the client
// sends what it holds, releases the claim and only then acknowledges the
// recall, so every other client sees every acknowledged change at once.
//
// What can lose an acknowledged change: the client dying before it sent
// it (as a power cut loses what a local file system had not committed),
// or the client cut off from the MDS past a recall's deadline (a lease
// and a second), after which the MDS takes the claim away and refuses
// what the client sends later. An MDS restart loses nothing: the claim
// is stored, and the client sends what it holds to the next process.
// Lost changes are reported by the next SyncDir or SyncNames.
type writeBack struct {
	c *Client

	mu     sync.Mutex
	dirs   map[uint64]*wbDir // claimed directory → its state
	inodes map[uint64]*wbDir // inode of a name in a claimed directory → the directory
	queued int               // ops not yet applied by the MDS, all directories
	room   chan struct{}     // closed (and replaced) when queued drops
	kick   chan struct{}     // wakes the sender (buffered, one)
	nNames int               // names held, all claimed directories
	pool   *wire.Pool        // carries flushes (writeback_send.go)
	// Losses not yet reported: per directory, and the directory of each
	// create lost (for Settle).
	lostDirs     map[uint64]error
	lostInos     map[uint64]uint64
	lostOverflow bool
	ended        []uint64 // inodes of claims ended, for the cache's caller to drop
	start        sync.Once
	claimed      uint64 // claims taken so far (wbDir.seq)
}

const (
	// maxQueuedNameOps bounds the acknowledged ops not yet applied, all
	// directories: a writer past it waits for the sender.
	maxQueuedNameOps = 4096
	// maxClaimedNames bounds the names of claimed directories held in
	// memory, all of them: past it creates go to the MDS.
	maxClaimedNames = 1 << 20
	// maxClaimedDirs bounds the directories a client holds claims on:
	// past it new ones are not claimed.
	maxClaimedDirs = 1024
)

// wbDir is one claimed directory.
type wbDir struct {
	ino, claim  uint64
	attr        Attr              // the directory's attributes, as changed here
	names       map[string]wbName // every name in it
	byIno       map[uint64]string // and the other way
	base, step  uint64            // inode numbers: base + i*step for i < count
	count, next uint64
	queue       []wbOp // acknowledged, not yet applied, in order
	sending     bool   // a flush is on its way
	sent        chan struct{}
	inflight    *wbBatch   // sent, not answered: sent again as it is
	maxOps      int        // ops one flush may carry (the MDS says)
	single      int        // ops to send one at a time (a batch of them was refused)
	ending      bool       // recalled or full: no new ops, release at the next flush
	opMu        sync.Mutex // serialises this directory's local ops (a kernel does anyway)
	seq         uint64     // the order the claim was taken in (oldestLocked)
}

// oldestLocked is the claim held longest that is not ending, or nil.
func (w *writeBack) oldestLocked() *wbDir {
	var oldest *wbDir
	for _, d := range w.dirs {
		if !d.ending && (oldest == nil || d.seq < oldest.seq) {
			oldest = d
		}
	}
	return oldest
}

// wbName is a name in a claimed directory: its inode's attributes as
// made here, until a writer opened it or its attributes were changed at
// the MDS (stale: asked of the MDS then).
type wbName struct {
	a     Attr
	stale bool
}

// wbOp is one acknowledged op and who it acts as (hasWho: named to the
// MDS; otherwise the client's default).
type wbOp struct {
	op     mdsproto.DirOp
	who    Caller
	hasWho bool
}

// EnableWriteBackNames makes a client that caches metadata claim the
// directories it makes from now on (Options.WriteBackNames).
func (c *Client) EnableWriteBackNames() { c.wbOn.Store(true) }

func (c *Client) writeBack() *writeBack {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	if c.wb == nil {
		c.wb = &writeBack{c: c, dirs: map[uint64]*wbDir{}, inodes: map[uint64]*wbDir{},
			room: make(chan struct{}), kick: make(chan struct{}, 1), pool: wire.NewPoolOn(c.mdsNetwork()),
			lostDirs: map[uint64]error{}, lostInos: map[uint64]uint64{}}
	}
	return c.wb
}

// wbCaller is who ops made with ctx act as, for the claim's checks: the
// caller named, or root for a client that names no one and whose
// credential may act as anyone (or that has none, on an open cluster);
// ok is false where the MDS would take it for nobody.
func (c *Client) wbCaller(ctx context.Context) (who Caller, ok, named bool) {
	if who, ok := c.callerFor(ctx); ok {
		return who, true, true
	}
	if cred := c.opts.Credential; cred == nil || cred.Principal.AnyID {
		return Caller{}, true, false
	}
	return Caller{}, false, false
}

// claimable reports whether names in a directory with attributes dir
// may be changed here for who: the MDS would allow it whatever the
// entries (root, or the directory's owner with write and search
// permission; not set-group-ID, whose group rules stay at the MDS).
func claimable(dir Attr, who Caller, hasWho bool) bool {
	if !hasWho || dir.Type != mdsproto.TypeDir || dir.Mode&0o2000 != 0 {
		return false
	}
	return who.Uid == 0 || (who.Uid == dir.Uid && dir.Mode&0o300 == 0o300)
}

// claimNew claims directory d, just made here, if the client caches.
func (c *Client) claimNew(ctx context.Context, d Attr) {
	m := c.metaCache()
	if m == nil || !c.wbOn.Load() {
		return
	}
	who, hasWho, _ := c.wbCaller(ctx)
	if !claimable(d, who, hasWho) {
		return
	}
	w := c.writeBack()
	w.mu.Lock()
	full := len(w.dirs) >= maxClaimedDirs
	var oldest *wbDir
	if len(w.dirs) >= maxClaimedDirs-maxClaimedDirs/8 {
		oldest = w.oldestLocked()
	}
	w.mu.Unlock()
	if oldest != nil {
		// Room for the next: the claim held longest is given back (an
		// untar is done with the directories it made first).
		w.recall(oldest.ino)
	}
	if full || !m.awaitEpoch(ctx) {
		return
	}
	m.mu.Lock()
	epoch := m.epoch
	m.mu.Unlock()
	if epoch == 0 {
		return
	}
	id := rand.Uint64() | 1
	var r mdsproto.DirClaimResp
	if err := c.mds(ctx, mdsproto.OpDirClaim, mdsproto.DirClaimReq{Session: c.once.id, Epoch: epoch, Dir: d.Ino, Claim: id}, &r); err != nil {
		var re *wire.RemoteError
		if !errors.As(err, &re) {
			w.releaseUnheard(d.Ino, id) // granted perhaps, its answer lost
		}
		return // not claimed: names go to the MDS one by one
	}
	w.start.Do(func() { go w.run() })
	w.mu.Lock()
	w.claimed++
	w.dirs[d.Ino] = &wbDir{ino: d.Ino, claim: r.Claim, attr: r.Dir, names: map[string]wbName{}, byIno: map[uint64]string{},
		base: r.InoBase, step: r.InoStep, count: r.InoCount, maxOps: r.MaxOps, sent: make(chan struct{}), seq: w.claimed}
	w.mu.Unlock()
	m.mu.Lock()
	moved := m.epoch != epoch
	m.mu.Unlock()
	if moved {
		w.recall(d.Ino) // its epoch ended while it was granted: the recall may have gone before
	}
}

// held is the claimed directory dir, if it is held and takes new ops.
func (w *writeBack) held(dir uint64) *wbDir {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.dirs[dir]; d != nil && !d.ending {
		return d
	}
	return nil
}

// lookup answers a name in a claimed directory (ok), or the directory's
// or a claimed name's attributes (name empty).
func (w *writeBack) lookup(ctx context.Context, dir uint64, name string) (Attr, bool, error) {
	if w == nil {
		return Attr{}, false, nil
	}
	e, held, found := w.entry(dir, name)
	switch {
	case !held:
		return Attr{}, false, nil
	case !found:
		return Attr{}, true, fmt.Errorf("%s: %w", name, wire.ErrNotFound)
	case !e.stale:
		return e.a, true, nil
	}
	// The MDS has it as it is now (a writer opened it, or its attributes
	// changed there): asking by inode number passes no claim's gate. A
	// client with claims caches (claimNew).
	a, err := w.c.metaCache().lookup(ctx, e.a.Ino, "")
	return a, true, err
}

// entry is what a claim held here answers for name in dir (held), or
// for inode dir itself with name empty: a claimed directory, or a name
// in one.
func (w *writeBack) entry(dir uint64, name string) (e wbName, held, found bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if name != "" {
		d := w.dirs[dir]
		if d == nil {
			return wbName{}, false, false
		}
		e, found = d.names[name]
		return e, true, found
	}
	if d := w.dirs[dir]; d != nil {
		return wbName{a: d.attr}, true, true
	}
	if d := w.inodes[dir]; d != nil {
		return d.names[d.byIno[dir]], true, true
	}
	return wbName{}, false, false
}

// create makes an empty file in a claimed directory here (ok false: not
// claimed, or not for this caller; the MDS must be asked).
func (w *writeBack) create(ctx context.Context, dir uint64, name string, o CreateOptions) (Attr, bool, error) {
	if w == nil {
		return Attr{}, false, nil
	}
	d := w.held(dir)
	if d == nil || o.Layout != "" {
		return Attr{}, false, nil
	}
	who, hasWho, named := w.c.wbCaller(ctx)
	if !mdsproto.ValidName(name) || !w.leased() {
		return Attr{}, false, nil
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	w.mu.Lock()
	ok := !d.ending && claimable(d.attr, who, hasWho) && w.nNames < maxClaimedNames
	_, exists := d.names[name]
	w.mu.Unlock()
	if !ok || (exists && !o.Exclusive) {
		return Attr{}, false, nil
	}
	if exists {
		return Attr{}, true, fmt.Errorf("%s: %w", name, wire.ErrExists)
	}
	if err := w.waitRoom(ctx); err != nil {
		return Attr{}, true, err
	}
	ino, err := w.number(ctx, d)
	if err != nil {
		return Attr{}, false, nil // the claim is ending: ask the MDS
	}
	now := time.Now().UnixNano()
	a := Attr{Ino: ino, Type: mdsproto.TypeFile, Mode: o.Mode & 0o7777, Nlink: 1, Uid: o.Uid, Gid: o.Gid,
		MtimeNs: now, CtimeNs: now, AtimeNs: now}
	if who.Uid != 0 {
		a.Uid, a.Gid = who.Uid, who.Gid // as the MDS makes an unprivileged caller's files
	}
	if !w.leased() {
		return Attr{}, false, nil // the number is lost: numbers need not be dense
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d.ending {
		return Attr{}, false, nil
	}
	d.names[name] = wbName{a: a}
	w.nNames++
	d.byIno[ino] = name
	w.inodes[ino] = d
	d.attr.MtimeNs, d.attr.CtimeNs = now, now
	w.enqueue(d, wbOp{op: mdsproto.DirOp{Name: name, Ino: ino, Mode: a.Mode, Uid: a.Uid, Gid: a.Gid, TimeNs: now}, who: who, hasWho: named})
	return a, true, nil
}

// remove unlinks a name that is not a directory in a claimed directory
// here (ok false: the MDS must be asked).
func (w *writeBack) remove(ctx context.Context, dir uint64, name string) (bool, error) {
	if w == nil {
		return false, nil
	}
	d := w.held(dir)
	if d == nil {
		return false, nil
	}
	who, hasWho, named := w.c.wbCaller(ctx)
	if !w.leased() {
		return false, nil
	}
	d.opMu.Lock()
	defer d.opMu.Unlock()
	w.mu.Lock()
	e, exists := d.names[name]
	a := e.a
	ok := !d.ending && claimable(d.attr, who, hasWho)
	w.mu.Unlock()
	if !ok {
		return false, nil
	}
	if !exists {
		return true, fmt.Errorf("%s: %w", name, wire.ErrNotFound)
	}
	if a.Type != mdsproto.TypeFile {
		return false, nil
	}
	if err := w.waitRoom(ctx); err != nil {
		return true, err
	}
	now := time.Now().UnixNano()
	if !w.leased() {
		return false, nil
	}
	w.mu.Lock()
	if d.ending {
		w.mu.Unlock()
		return false, nil
	}
	delete(d.names, name)
	w.nNames--
	delete(d.byIno, a.Ino)
	delete(w.inodes, a.Ino)
	d.attr.MtimeNs, d.attr.CtimeNs = now, now
	w.enqueue(d, wbOp{op: mdsproto.DirOp{Remove: true, Name: name}, who: who, hasWho: named})
	w.mu.Unlock()
	if e.stale && w.c.renewer.holdsIno(a.Ino) {
		// The file is open here at the MDS: the MDS is told now, so the
		// open handles keep it with no links (fstat shows nlink 0), as
		// it keeps an open file its last unlink would delete. One not
		// open here is left to the sender, as any unlink held here.
		// Close-then-unlink meets this whenever the kernel's release of
		// the handle comes after the unlink. The unlink is acknowledged
		// either way: a flush not answered is sent again by the sender,
		// and one refused is reported at the next fsync of the
		// directory or syncfs, as for any unlink held here.
		_ = w.flush(ctx, d, false)
	}
	return true, nil
}

// leased reports whether the client's cache lease holds: a change is
// answered here only then, when the MDS has heard from this client
// within a lease and so cannot have taken a claim of its away yet.
func (w *writeBack) leased() bool {
	m := w.c.metaCache()
	return m != nil && m.leaseLeft() > 0
}

// enqueue adds an acknowledged op to d's queue; w.mu is held.
func (w *writeBack) enqueue(d *wbDir, op wbOp) {
	d.queue = append(d.queue, op)
	w.queued++
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// waitRoom waits until the queue has room for one more op, for no
// longer than a request to the MDS may take.
func (w *writeBack) waitRoom(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, w.c.opts.IOTimeout)
	defer cancel()
	for {
		w.mu.Lock()
		if w.queued < maxQueuedNameOps {
			w.mu.Unlock()
			return nil
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// number is the next inode number of d's claim, after a new range if it
// ran out (the old range's creates are flushed first: the MDS accepts
// only the newest range). d.opMu is held.
func (w *writeBack) number(ctx context.Context, d *wbDir) (uint64, error) {
	w.mu.Lock()
	if d.next < d.count {
		ino := d.base + d.next*d.step
		d.next++
		w.mu.Unlock()
		return ino, nil
	}
	w.mu.Unlock()
	if err := w.flush(ctx, d, false); err != nil {
		return 0, err
	}
	var r mdsproto.DirClaimResp
	if err := w.c.mds(ctx, mdsproto.OpDirClaim, mdsproto.DirClaimReq{Session: w.c.once.id, Dir: d.ino, Claim: d.claim, Extend: true}, &r); err != nil {
		w.mu.Lock()
		d.ending = true
		w.mu.Unlock()
		w.poke()
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.InoCount == 0 {
		return 0, fmt.Errorf("directory %d: an empty range of inode numbers", d.ino)
	}
	d.base, d.step, d.count, d.next = r.InoBase, r.InoStep, r.InoCount, 1
	return d.base, nil
}

// release sends what is queued for dir and ends the claim (a recall, or
// an operation the claim does not cover). The caller then goes to the MDS.
func (w *writeBack) release(ctx context.Context, dir uint64) error {
	if d := w.recall(dir); d != nil {
		return w.flush(ctx, d, true)
	}
	return nil
}

// recall marks dir's claim ending (no new ops) and has the sender send
// what it holds and release it; it returns the claim, nil if none is
// held. It does not wait: the MDS waits for the release itself, not for
// the recall's acknowledgement (and the sender goes on where a caller's
// flush gives up).
func (w *writeBack) recall(dir uint64) *wbDir {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	d := w.dirs[dir]
	if d != nil {
		d.ending = true
	}
	w.mu.Unlock()
	w.poke()
	return d
}

// recallAll recalls every claim (the cache's epoch changed: the MDS
// restarted, or no longer counts this client).
func (w *writeBack) recallAll() {
	for _, d := range w.heldDirs() {
		w.recall(d.ino)
	}
}

// releaseAll releases every claim (the client closes).
func (w *writeBack) releaseAll(ctx context.Context) {
	for _, d := range w.heldDirs() {
		_ = w.release(ctx, d.ino)
	}
}

// heldDirs is the claims held now.
func (w *writeBack) heldDirs() []*wbDir {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	dirs := make([]*wbDir, 0, len(w.dirs))
	for _, d := range w.dirs {
		dirs = append(dirs, d)
	}
	return dirs
}

// settle makes sure the MDS knows what ino is: if it is a name in a
// claimed directory (or the directory), the directory's queue is sent
// first. With stale, the name's attributes are asked of the MDS from
// then on (a writer opens it).
func (w *writeBack) settle(ctx context.Context, ino uint64, stale bool) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	d := w.inodes[ino]
	if d != nil && stale {
		name := d.byIno[ino]
		e := d.names[name]
		e.stale = true
		d.names[name] = e
	}
	if d == nil {
		d = w.dirs[ino]
	}
	w.mu.Unlock()
	if d == nil {
		return nil
	}
	return w.flush(ctx, d, false)
}

// settleOpen is settle(ctx, ino, true) for a writer's open of ino: if
// ino's directory has ops queued, the open rides on the flush that sends
// them (DirFlushReq.Open) and its answer comes back; nil if it was not
// sent that way (nothing queued, another caller's batch, or refused),
// and the caller opens as before.
//
// sizeHint, if above 0, is the size the writer fills the file to at
// once: if the create is still queued it carries it, and a small file
// is placed as one (mdsproto.DirOp.SizeHint).
func (w *writeBack) settleOpen(ctx context.Context, ino uint64, req mdsproto.OpenReq, sizeHint int64) (*mdsproto.OpenResp, error) {
	if w == nil {
		return nil, nil
	}
	w.mu.Lock()
	d := w.inodes[ino]
	if d != nil {
		name := d.byIno[ino]
		e := d.names[name]
		e.stale = true
		d.names[name] = e
		if sizeHint > 0 && e.a.Size == 0 {
			d.hintQueuedCreate(ino, sizeHint)
		}
	}
	w.mu.Unlock()
	if d == nil {
		return nil, w.settle(ctx, ino, true)
	}
	who, _, named := w.c.wbCaller(ctx)
	open := &flushOpen{req: req, caller: wbOp{who: who, hasWho: named}}
	if err := w.flushWith(ctx, d, false, open); err != nil {
		return nil, err
	}
	return open.resp, nil
}

// setattrQueued applies a change of mode, owner or times to a file whose
// create is still queued here, to the create itself: the MDS gets the
// file as changed in one op (tar's utimensat, fchown and fchmod before
// close cost nothing, and the create can still carry the size of a file
// written whole). ok false: not such a file, or a change the MDS must
// judge (the set-ID bits' clearing, a caller other than root), asked of
// the MDS as before.
func (w *writeBack) setattrQueued(ctx context.Context, req mdsproto.SetattrReq) (Attr, bool) {
	if w == nil || req.KillSuidgid || (req.Mode == nil && req.Uid == nil && req.Gid == nil && req.AtimeNs == nil && req.MtimeNs == nil) {
		return Attr{}, false
	}
	if req.Mode != nil && *req.Mode&^0o7777 != 0 {
		return Attr{}, false
	}
	who, hasWho, named := w.c.wbCaller(ctx)
	if !hasWho || who.Uid != 0 {
		return Attr{}, false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.inodes[req.Ino]
	if d == nil || d.ending {
		return Attr{}, false
	}
	name := d.byIno[req.Ino]
	e, ok := d.names[name]
	if !ok || e.stale {
		return Attr{}, false
	}
	op := d.queuedCreate(req.Ino)
	if op == nil || !sameCaller(*op, wbOp{who: who, hasWho: named}) {
		return Attr{}, false
	}
	if req.Mode != nil {
		op.op.Mode, e.a.Mode = *req.Mode, *req.Mode
	}
	if req.Uid != nil {
		op.op.Uid, e.a.Uid = *req.Uid, *req.Uid
	}
	if req.Gid != nil {
		op.op.Gid, e.a.Gid = *req.Gid, *req.Gid
	}
	if req.MtimeNs != nil {
		op.op.MtimeNs, e.a.MtimeNs = *req.MtimeNs, *req.MtimeNs
	}
	if req.AtimeNs != nil {
		op.op.AtimeNs, e.a.AtimeNs = *req.AtimeNs, *req.AtimeNs
	}
	e.a.CtimeNs = time.Now().UnixNano()
	d.names[name] = e
	return e.a, true
}

// queuedCreate is ino's create if it is queued and not yet sent (the
// batch in flight holds the first ops of the queue as they were sent:
// those are not changed). The caller holds w.mu.
func (d *wbDir) queuedCreate(ino uint64) *wbOp {
	from := 0
	if d.inflight != nil {
		from = d.inflight.n
	}
	for i := len(d.queue) - 1; i >= from; i-- {
		if op := &d.queue[i]; op.op.Ino == ino {
			if op.op.Remove {
				return nil
			}
			return op
		}
	}
	return nil
}

// hintQueuedCreate sets the size hint of ino's create if it is queued
// and not yet sent. The caller holds w.mu.
func (d *wbDir) hintQueuedCreate(ino uint64, sizeHint int64) {
	if op := d.queuedCreate(ino); op != nil {
		op.op.SizeHint = sizeHint
	}
}

// leave readies inode ino for a change at the MDS: a claimed directory
// is released (its attributes are the MDS's again), a name in one sent
// and its attributes asked of the MDS from then on.
func (w *writeBack) leave(ctx context.Context, ino uint64) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	_, claimed := w.dirs[ino]
	w.mu.Unlock()
	if claimed {
		return w.release(ctx, ino)
	}
	return w.settle(ctx, ino, true)
}

// SyncDir makes the changes of names in directory dir that this client
// acknowledged durable (fsync of a directory), and reports changes lost.
func (c *Client) SyncDir(ctx context.Context, dir uint64) error {
	w := c.wbIfAny()
	if err := w.settle(ctx, dir, false); err != nil {
		return err
	}
	return w.takeLost(dir)
}

// Settle makes the name of inode ino durable if this client created it
// in a claimed directory (fsync of a file), and reports changes lost.
func (c *Client) Settle(ctx context.Context, ino uint64) error {
	w := c.wbIfAny()
	if err := w.settle(ctx, ino, false); err != nil {
		return err
	}
	return w.lostOf(ino)
}

// SyncNames makes every change of names this client acknowledged
// durable (syncfs), and reports changes lost.
func (c *Client) SyncNames(ctx context.Context) error {
	w := c.wbIfAny()
	if w == nil {
		return nil
	}
	var errs []error
	for _, d := range w.heldDirs() {
		if err := w.flush(ctx, d, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, w.takeLost(0))...)
}

func (c *Client) wbIfAny() *writeBack {
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	return c.wb
}

// holdsAttr reports whether a is what this client answers for its inode
// under a claim (a caller may cache it as long as the cache's lease).
func (w *writeBack) holdsAttr(a Attr) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.dirs[a.Ino]; d != nil {
		return sameStat(d.attr, a)
	}
	d := w.inodes[a.Ino]
	if d == nil {
		return false
	}
	e := d.names[d.byIno[a.Ino]]
	return !e.stale && sameStat(e.a, a)
}

// holdsEntry reports whether name in dir is ino under a claim held here.
func (w *writeBack) holdsEntry(dir uint64, name string, ino uint64) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.dirs[dir]
	return d != nil && d.names[name].a.Ino == ino && ino != 0
}

// sameStat reports whether a and b show the same attributes to stat.
func sameStat(a, b Attr) bool {
	return a.Ino == b.Ino && a.CtimeNs == b.CtimeNs && a.MtimeNs == b.MtimeNs && a.Size == b.Size &&
		a.Mode == b.Mode && a.Nlink == b.Nlink && a.Uid == b.Uid && a.Gid == b.Gid
}

// claimedAttr is a, or if a is a directory claimed here, its attributes
// as changed here (the MDS's lag behind what it was not sent yet).
func (w *writeBack) claimedAttr(a Attr) Attr {
	if w == nil || a.Type != mdsproto.TypeDir {
		return a
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.dirs[a.Ino]; d != nil {
		return d.attr
	}
	return a
}
