package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Sending what a claim holds (writeback.go): a batch at a time per
// directory, in order. A batch keeps the name (mdsproto.Once) it was
// first sent under until it is answered, so sent again after a timeout
// or a reconnect it is applied once: a resend under a new name could find
// its own first copy applied meanwhile and be refused for it. Flushes go
// over a connection pool of their own: the holder's other requests may
// all be waiting at the MDS for its own claim's release, which this
// carries (as CacheWait has a pool of its own for its acknowledgements).

// wbBatch is a batch sent and not yet answered.
type wbBatch struct {
	once    mdsproto.Once
	n       int  // the first n ops of the queue
	release bool // ends the claim after them
	// open, if set, is a writer's open sent with the batch (settleOpen):
	// sent again with it, answered with it.
	open *flushOpen
}

// flushOpen is a writer's open that rides on the flush of the queue
// holding its file's create (mdsproto.DirFlushReq.Open).
type flushOpen struct {
	req    mdsproto.OpenReq
	caller wbOp // who opens: the batch it rides on acts as the same
	resp   *mdsproto.OpenResp
}

func (w *writeBack) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run sends what is queued, and releases what is recalled, for as long
// as the client lives.
func (w *writeBack) run() {
	ctx := w.c.life
	for {
		select {
		case <-w.kick:
		case <-ctx.Done():
			return
		}
		w.linger(ctx)
		for ctx.Err() == nil {
			d := w.nextToSend()
			if d == nil {
				break
			}
			w.mu.Lock()
			release := d.ending
			w.mu.Unlock()
			if err := w.flush(ctx, d, release); err != nil && !errors.Is(err, wire.ErrRecalled) {
				Pause(ctx, 100*time.Millisecond) // the MDS is away or busy: again soon
			}
		}
	}
}

// wbLinger is how long the sender lets new ops wait before it sends
// them: a file's first write follows its create at once (tar, cp), and
// its open then rides on the flush that sends the create (settleOpen),
// where a create already sent costs the write a flush to wait for and an
// open of its own. A recall, or a full queue, is not kept waiting.
// Options.WriteBackLinger overrides it.
const wbLinger = 2 * time.Millisecond

// linger waits wbLinger unless a claim is ending or the queue is full.
func (w *writeBack) linger(ctx context.Context) {
	w.mu.Lock()
	urgent := w.queued >= maxQueuedNameOps/2
	for _, d := range w.dirs {
		urgent = urgent || d.ending
	}
	w.mu.Unlock()
	if urgent {
		return
	}
	d := w.c.opts.WriteBackLinger
	if d <= 0 {
		d = wbLinger
	}
	Pause(ctx, d)
}

// nextToSend is a directory with ops queued (or a release due) and
// nothing on its way.
func (w *writeBack) nextToSend() *wbDir {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.dirs {
		if !d.sending && (len(d.queue) > 0 || d.ending) {
			return d
		}
	}
	return nil
}

// flush sends d's queued ops, a batch at a time, and with release ends
// the claim after them. One batch of d is on its way at a time.
func (w *writeBack) flush(ctx context.Context, d *wbDir, release bool) error {
	return w.flushWith(ctx, d, release, nil)
}

// flushWith is flush, sending open with the batch that empties the queue
// (its answer is then in open.resp).
func (w *writeBack) flushWith(ctx context.Context, d *wbDir, release bool, open *flushOpen) error {
	err := w.flushLocking(ctx, d, release, open)
	w.notifyEnded()
	// The sender skips a directory with a batch on its way, so a recall
	// (or an op queued) while a caller's flush was out, or what that
	// flush left unsent, is the sender's to take up now.
	w.mu.Lock()
	more := w.dirs[d.ino] == d && (d.ending || len(d.queue) > 0)
	w.mu.Unlock()
	if more {
		w.poke()
	}
	return err
}

func (w *writeBack) flushLocking(ctx context.Context, d *wbDir, release bool, open *flushOpen) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for d.sending {
			sent := d.sent
			w.mu.Unlock()
			select {
			case <-sent:
			case <-ctx.Done():
				w.mu.Lock()
				return ctx.Err()
			}
			w.mu.Lock()
		}
		if w.dirs[d.ino] != d {
			return nil // ended meanwhile (what it lost is reported by takeLost)
		}
		if len(d.queue) == 0 && !release && d.inflight == nil {
			return nil
		}
		b := d.inflight
		if b == nil {
			n := w.batchLen(d)
			b = &wbBatch{once: w.c.once.begin(), n: n, release: release && n == len(d.queue)}
			if open != nil && open.resp == nil && n == len(d.queue) && n > 0 && sameCaller(d.queue[0], open.caller) {
				b.open = open
			}
			d.inflight = b
		}
		ops := d.queue[:b.n:b.n]
		d.sending = true
		w.mu.Unlock()
		err := w.send(ctx, d, ops, b)
		w.mu.Lock()
		d.sending = false
		close(d.sent)
		d.sent = make(chan struct{})
		switch {
		case err == nil:
		case errors.Is(err, wire.ErrRecalled):
			w.answered(d, b, 0)
			w.noteLostLocked(d, d.queue, err)
			w.endLocked(d)
			return err
		case refused(err) && b.n > 1:
			// Sent again one by one, to lose only what is refused.
			w.answered(d, b, 0)
			d.single = b.n
			continue
		case refused(err):
			if b.n == 0 { // a release refused: the claim is not there to end
				w.answered(d, b, 0)
				w.endLocked(d)
				return err
			}
			// Lost (reported), and what is here no longer matches the
			// MDS: the claim ends after what is queued.
			w.noteLostLocked(d, ops, err)
			d.ending, release = true, true
			w.answered(d, b, b.n)
			continue
		default:
			return err // not answered: sent again as it was
		}
		w.answered(d, b, b.n)
		if b.release {
			w.endLocked(d)
			return nil
		}
	}
}

// answered ends batch b (its name is the MDS's to forget) and drops the
// first n ops of d's queue; w.mu is held.
func (w *writeBack) answered(d *wbDir, b *wbBatch, n int) {
	w.c.once.end(b.once.Seq)
	d.inflight = nil
	d.queue = d.queue[n:]
	d.single = max(d.single-n, 0)
	if n > 0 {
		w.dropped(n)
	}
}

// batchLen is how many queued ops the next batch of d carries: at most
// what the MDS takes in one, all acting as one caller, one at a time
// after a batch was refused.
func (w *writeBack) batchLen(d *wbDir) int {
	q := d.queue
	if len(q) == 0 {
		return 0
	}
	most := d.maxOps
	if d.single > 0 || most <= 0 {
		most = 1
	}
	n := 1
	for n < len(q) && n < most && sameCaller(q[n], q[0]) {
		n++
	}
	return n
}

// refused reports whether the MDS answered err for the ops themselves
// (sending them again would fail again).
func refused(err error) bool {
	var re *wire.RemoteError
	return errors.As(err, &re) && re.Code != wire.ErrBusy && re.Code != wire.ErrNotLeader && re.Code != wire.ErrMoved &&
		re.Code != wire.ErrInternal && re.Code != wire.ErrRecalled
}

func sameCaller(a, b wbOp) bool {
	return a.hasWho == b.hasWho && a.who.Uid == b.who.Uid && a.who.Gid == b.who.Gid && slices.Equal(a.who.Groups, b.who.Groups)
}

// send applies ops at the MDS under b's name.
func (w *writeBack) send(ctx context.Context, d *wbDir, ops []wbOp, b *wbBatch) error {
	req := &mdsproto.DirFlushReq{Session: w.c.once.id, Dir: d.ino, Claim: d.claim, Release: b.release}
	for _, op := range ops {
		req.Ops = append(req.Ops, op.op)
	}
	if len(ops) > 0 && ops[0].hasWho {
		ctx = WithCaller(ctx, ops[0].who)
	}
	var resp mdsproto.DirFlushResp
	if b.open != nil {
		req.Open = &b.open.req
	}
	err := w.c.mutateAs(ctx, w.pool, b.once, mdsproto.OpDirFlush, req, &resp)
	if err == nil && b.open != nil {
		b.open.resp = resp.Open
	}
	return err
}

// releaseUnheard releases a claim whose grant the client never heard
// (the answer was lost): by its id, behind the caller.
func (w *writeBack) releaseUnheard(dir, claim uint64) {
	go func() {
		ctx, cancel := context.WithTimeout(w.c.life, w.c.opts.IOTimeout)
		defer cancel()
		o := w.c.once.begin()
		defer w.c.once.end(o.Seq)
		req := &mdsproto.DirFlushReq{Session: w.c.once.id, Dir: dir, Claim: claim, Release: true}
		_ = w.c.mutateAs(ctx, w.pool, o, mdsproto.OpDirFlush, req, nil)
	}()
}

// dropped counts n ops applied (or lost); w.mu is held.
func (w *writeBack) dropped(n int) {
	w.queued -= n
	close(w.room)
	w.room = make(chan struct{})
}

// endLocked forgets a released (or lost) claim.
func (w *writeBack) endLocked(d *wbDir) {
	if w.dirs[d.ino] != d {
		return
	}
	delete(w.dirs, d.ino)
	d.ending = true
	w.nNames -= len(d.names)
	w.ended = append(w.ended, d.ino)
	for _, e := range d.names {
		delete(w.inodes, e.a.Ino)
		w.ended = append(w.ended, e.a.Ino)
	}
	if len(d.queue) > 0 {
		w.dropped(len(d.queue))
	}
	d.queue = nil
}

// notifyEnded tells the cache's caller (a kernel) of the inodes of
// claims that ended: what it kept of them came from here, and is now the
// MDS's to keep coherent.
func (w *writeBack) notifyEnded() {
	w.mu.Lock()
	ended := w.ended
	w.ended = nil
	w.mu.Unlock()
	m := w.c.metaCache()
	if len(ended) == 0 || m == nil {
		return
	}
	changed := make([]changedInode, len(ended))
	for i, ino := range ended {
		changed[i] = changedInode{ino: ino}
	}
	m.notify(changed)
}

// maxLostNoted bounds the directories and inodes whose losses wait to
// be reported.
const maxLostNoted = 1 << 16

// noteLostLocked notes ops of d lost, for the next SyncDir of d, Settle
// of a file they made, or SyncNames.
func (w *writeBack) noteLostLocked(d *wbDir, ops []wbOp, err error) {
	if len(ops) == 0 {
		return
	}
	if len(w.lostDirs) >= maxLostNoted {
		clear(w.lostDirs)
		clear(w.lostInos)
		w.lostOverflow = true
	}
	w.lostDirs[d.ino] = errors.Join(w.lostDirs[d.ino], fmt.Errorf("directory %d: %d changes lost (%q first): %w", d.ino, len(ops), ops[0].op.Name, err))
	for _, op := range ops {
		if !op.op.Remove && len(w.lostInos) < maxLostNoted {
			w.lostInos[op.op.Ino] = d.ino
		}
	}
}

// takeLost returns the losses noted for dir (all of them for dir 0),
// and forgets them.
func (w *writeBack) takeLost(dir uint64) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if w.lostOverflow {
		err = errors.New("write-back: changes lost, more than could be noted")
		if dir == 0 {
			w.lostOverflow = false
		}
	}
	if dir == 0 {
		for _, e := range w.lostDirs {
			err = errors.Join(err, e)
		}
		clear(w.lostDirs)
		clear(w.lostInos)
		return err
	}
	err = errors.Join(err, w.lostDirs[dir])
	delete(w.lostDirs, dir)
	return err
}

// lostOf is the loss noted for the directory inode ino was made in, if
// its create was lost.
func (w *writeBack) lostOf(ino uint64) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if dir, ok := w.lostInos[ino]; ok {
		return w.lostDirs[dir]
	}
	return nil
}
