package mds

// On-demand and periodic scrubs: which files to verify, and the queue
// repair workers take them from.

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// scrub queues the files at or below path for an on-demand scrub.
func (q *repairQueue) scrub(ctx context.Context, req mdsproto.ScrubReq) (mdsproto.ScrubResp, error) {
	if req.Ino == 0 {
		if err := requireRole(ctx, rAdmins|rHealer, "scrub a tree"); err != nil {
			return mdsproto.ScrubResp{}, err
		}
	}
	var inos []uint64
	err := q.kv.View(ctx, func(r kv.Reader) error {
		var root *inodeRec
		var err error
		if req.Ino != 0 {
			root, err = getInode(r, req.Ino)
			if err == nil && root.Type != mdsproto.TypeFile && requireRole(ctx, rAdmins|rHealer, "") != nil {
				// A reader asks for its file's scrub; a tree's is the
				// administrator's, by inode too.
				return wire.Errorf(wire.ErrDenied, "inode %d: only the administrator scrubs a tree", req.Ino)
			}
		} else {
			root, err = resolve(r, whoOf(ctx), 0, req.Path)
		}
		if err != nil {
			return err
		}
		inos = inos[:0]
		return collectFiles(r, root, &inos, maxScrubQueue)
	})
	if err != nil {
		return mdsproto.ScrubResp{}, err
	}
	n := q.queueScrub(inos)
	if n < int64(len(inos)) {
		return mdsproto.ScrubResp{Files: n}, wire.Errorf(wire.ErrBusy, "scrub queue holds %d files; try again later", maxScrubQueue)
	}
	return mdsproto.ScrubResp{Files: n}, nil
}

// queueScrub adds files to the scrub queue and returns how many it took.
func (q *repairQueue) queueScrub(inos []uint64) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := int64(0)
	for _, ino := range inos {
		if len(q.scrubQ) >= maxScrubQueue {
			break
		}
		if !q.scrubIn[ino] {
			q.scrubIn[ino] = true
			q.scrubQ = append(q.scrubQ, ino)
		}
		n++
	}
	return n
}

// collectFiles appends the files in the tree at rec (breadth first), up to
// limit of them.
func collectFiles(r kv.Reader, rec *inodeRec, out *[]uint64, limit int) error {
	if rec.Type == mdsproto.TypeFile {
		*out = append(*out, rec.Ino)
		return nil
	}
	dirs := []uint64{rec.Ino}
	for len(dirs) > 0 && len(*out) < limit {
		dir := dirs[0]
		dirs = dirs[1:]
		var children []uint64
		err := r.Scan(direntPrefix(dir), kv.PrefixEnd(direntPrefix(dir)), func(k, v []byte) bool {
			if len(v) == 8 {
				children = append(children, binary.BigEndian.Uint64(v))
			}
			return true
		})
		if err != nil {
			return err
		}
		for _, ino := range children {
			child, err := getInode(r, ino)
			if err != nil {
				continue
			}
			switch {
			case child.Type == mdsproto.TypeDir:
				dirs = append(dirs, ino)
			case child.Type == mdsproto.TypeFile && len(*out) < limit: // symlinks hold no data
				*out = append(*out, ino)
			}
		}
	}
	return nil
}

// scrubLoop queues every file for a scrub every ScrubEvery.
func (q *repairQueue) scrubLoop(ctx context.Context) {
	if q.cfg.ScrubEvery <= 0 {
		return
	}
	t := time.NewTicker(q.cfg.ScrubEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !q.route.leading() {
			continue
		}
		if _, err := q.scrub(ctx, mdsproto.ScrubReq{Path: "/"}); err != nil && ctx.Err() == nil {
			q.cfg.Log.Warn("background scrub", "err", err)
		}
	}
}
