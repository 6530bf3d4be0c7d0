package client

import (
	"context"
	"fmt"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// mkdir makes directory req.Path in claimed directory dir at the MDS
// without giving up the claim (an untar makes a directory's
// subdirectories among its files; releasing the claim at each sent
// every later file of the directory to the MDS one by one). What is
// queued is sent first, so the MDS applies it in order before the
// mkdir; the mkdir names this client's session, so the MDS lets it past
// the claim; and the new name joins what the claim knows, as one the
// MDS has (stale: asked of it). ok false: not claimed, or not for this
// caller: the caller releases the claim and asks the MDS.
func (w *writeBack) mkdir(ctx context.Context, dir uint64, req *mdsproto.MkdirReq) (a Attr, ok bool, err error) {
	if w == nil {
		return Attr{}, false, nil
	}
	d := w.held(dir)
	if d == nil || !mdsproto.ValidName(req.Path) || !w.leased() {
		return Attr{}, false, nil
	}
	who, hasWho, _ := w.c.wbCaller(ctx)
	d.opMu.Lock()
	defer d.opMu.Unlock()
	w.mu.Lock()
	ok = !d.ending && claimable(d.attr, who, hasWho) && w.nNames < maxClaimedNames
	_, exists := d.names[req.Path]
	w.mu.Unlock()
	if !ok {
		return Attr{}, false, nil
	}
	if exists {
		return Attr{}, true, fmt.Errorf("%s: %w", req.Path, wire.ErrExists)
	}
	req.Session = w.c.once.id
	var in Attr
	if held, err := w.sendUnderClaim(ctx, d, func() error { return w.c.mutate(ctx, mdsproto.OpMkdir, req, &in) }); !held || err != nil {
		return Attr{}, held, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dirs[d.ino] == d && !d.ending {
		d.names[req.Path] = wbName{a: in, stale: true}
		d.byIno[in.Ino] = req.Path
		w.inodes[in.Ino] = d
		w.nNames++
		d.attr.Nlink++
		d.attr.MtimeNs, d.attr.CtimeNs = in.CtimeNs, in.CtimeNs
	}
	return in, true, nil
}

// sendUnderClaim sends what d queued, then change (a request naming this
// client's session, which the MDS lets past the claim), keeping the
// claim. held false: the queue could not be sent or the claim ended; the
// caller releases and asks the MDS as before (the release sends the
// queue again). A change whose outcome is unknown ends the claim: done
// or not, the claim no longer knows, and the MDS answers for the
// directory again.
func (w *writeBack) sendUnderClaim(ctx context.Context, d *wbDir, change func() error) (held bool, err error) {
	if err := w.flush(ctx, d, false); err != nil || !w.stillHeld(d) {
		return false, nil
	}
	if err := change(); err != nil {
		if !refused(err) {
			w.recall(d.ino)
		}
		return true, err
	}
	return true, nil
}

// stillHeld reports whether d is still a claim held and not ending.
func (w *writeBack) stillHeld(d *wbDir) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dirs[d.ino] == d && !d.ending
}

// setattrDir changes the attributes of claimed directory req.Ino at the
// MDS without giving up the claim (tar sets each directory's owner, mode
// and times once its files are in; releasing the claim there sent every
// later change in it to the MDS one by one). What is queued is sent
// first, so creates applied after cannot move the times set. ok false:
// not claimed, or not for this caller: the caller releases and asks.
func (w *writeBack) setattrDir(ctx context.Context, req mdsproto.SetattrReq) (a Attr, ok bool, err error) {
	if w == nil {
		return Attr{}, false, nil
	}
	w.mu.Lock()
	d := w.dirs[req.Ino]
	w.mu.Unlock()
	if d == nil || !w.leased() {
		return Attr{}, false, nil
	}
	who, hasWho, _ := w.c.wbCaller(ctx)
	d.opMu.Lock()
	defer d.opMu.Unlock()
	w.mu.Lock()
	ok = !d.ending && claimable(d.attr, who, hasWho)
	w.mu.Unlock()
	if !ok {
		return Attr{}, false, nil
	}
	req.Session = w.c.once.id
	var in Attr
	if held, err := w.sendUnderClaim(ctx, d, func() error { return w.c.mds(ctx, mdsproto.OpSetattr, req, &in) }); !held || err != nil {
		return Attr{}, held, err
	}
	w.mu.Lock()
	if w.dirs[d.ino] == d && !d.ending {
		d.attr = in // the MDS's, with everything queued applied
	}
	w.mu.Unlock()
	return in, true, nil
}

// rmdir removes directory name from claimed directory dir at the MDS
// without giving up the claim (rm -rf removes a directory's
// subdirectories among its files). A claim on the directory removed is
// given back first (its unlinks sent), then what dir queued is sent, and
// the rmdir names this client's session. ok false: not claimed, or not
// for this caller: the caller releases the claim and asks the MDS.
func (w *writeBack) rmdir(ctx context.Context, dir uint64, name string) (ok bool, err error) {
	if w == nil {
		return false, nil
	}
	d := w.held(dir)
	if d == nil || !mdsproto.ValidName(name) || !w.leased() {
		return false, nil
	}
	who, hasWho, _ := w.c.wbCaller(ctx)
	d.opMu.Lock()
	defer d.opMu.Unlock()
	w.mu.Lock()
	e, exists := d.names[name]
	ok = !d.ending && claimable(d.attr, who, hasWho)
	w.mu.Unlock()
	switch {
	case !ok:
		return false, nil
	case !exists:
		return true, fmt.Errorf("%s: %w", name, wire.ErrNotFound)
	case e.a.Type != mdsproto.TypeDir:
		return true, fmt.Errorf("%s: %w", name, wire.ErrNotDir)
	}
	if err := w.release(ctx, e.a.Ino); err != nil {
		return false, nil
	}
	req := &mdsproto.PathReq{Dir: dir, Path: name, Want: "dir", Session: w.c.once.id}
	if held, err := w.sendUnderClaim(ctx, d, func() error { return w.c.mutate(ctx, mdsproto.OpRemove, req, nil) }); !held || err != nil {
		return held, err
	}
	now := time.Now().UnixNano()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dirs[d.ino] == d && !d.ending {
		delete(d.names, name)
		delete(d.byIno, e.a.Ino)
		delete(w.inodes, e.a.Ino)
		w.nNames--
		d.attr.Nlink--
		d.attr.MtimeNs, d.attr.CtimeNs = now, now
	}
	return true, nil
}
