package client

import (
	"context"
	"errors"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// The inode-addressed API, for gateways that hold inodes rather than paths
// (the FUSE mount): entries are named by their directory's ino and a name,
// so a concurrent rename of an ancestor cannot redirect an operation.

// Attr is an inode's attributes as the MDS keeps them.
type Attr = mdsproto.Inode

// SetAttrRequest changes attributes; nil fields are left alone.
type SetAttrRequest = mdsproto.SetattrReq

// XattrRequest and XattrResult carry extended-attribute operations.
type (
	XattrRequest = mdsproto.XattrReq
	XattrResult  = mdsproto.XattrResp
	StatfsResult = mdsproto.StatfsResp
	DirEntry     = mdsproto.DirEntry
)

// rootIno is the root directory's inode number (the public rootIno).
const rootIno = 1

// LookupAt finds name in directory dir (from the cache, if the client
// caches metadata and holds it).
func (c *Client) LookupAt(ctx context.Context, dir uint64, name string) (Attr, error) {
	if a, ok, err := c.wbIfAny().lookup(ctx, dir, name); ok {
		return a, err
	}
	if m := c.metaCache(); m != nil && name != "" {
		a, err := m.lookup(ctx, dir, name)
		return c.wbIfAny().claimedAttr(a), err
	}
	var in Attr
	err := c.mds(ctx, mdsproto.OpLookup, mdsproto.PathReq{Dir: dir, Path: name}, &in)
	return in, err
}

// GetAttr fetches inode ino's attributes (from the cache, if the client
// caches metadata and holds them).
func (c *Client) GetAttr(ctx context.Context, ino uint64) (Attr, error) {
	if a, ok, err := c.wbIfAny().lookup(ctx, ino, ""); ok {
		return a, err
	}
	if m := c.metaCache(); m != nil {
		return m.lookup(ctx, ino, "")
	}
	var in Attr
	err := c.mds(ctx, mdsproto.OpLookup, mdsproto.PathReq{Dir: ino}, &in)
	return in, err
}

// SetAttr changes mode, owner or times (sizes change through File.Truncate).
func (c *Client) SetAttr(ctx context.Context, req SetAttrRequest) (Attr, error) {
	if a, ok := c.wbIfAny().setattrQueued(ctx, req); ok {
		return a, nil
	}
	if a, held, err := c.wbIfAny().setattrDir(ctx, req); held {
		return a, err
	}
	if err := c.wbIfAny().leave(ctx, req.Ino); err != nil {
		return Attr{}, err
	}
	var in Attr
	err := c.mds(ctx, mdsproto.OpSetattr, req, &in)
	return in, err
}

// MkdirAt makes directory name in dir with mode as given (0 is 0).
func (c *Client) MkdirAt(ctx context.Context, dir uint64, name string, mode, uid, gid uint32) (Attr, error) {
	req := &mdsproto.MkdirReq{Dir: dir, Path: name, Mode: mode, Uid: uid, Gid: gid}
	if in, held, err := c.wbIfAny().mkdir(ctx, dir, req); held {
		if err == nil {
			c.claimNew(ctx, in)
		}
		return in, err
	}
	if err := c.wbIfAny().release(ctx, dir); err != nil {
		return Attr{}, err
	}
	req.Session = 0
	var in Attr
	err := c.mutate(ctx, mdsproto.OpMkdir, req, &in)
	if err == nil {
		c.claimNew(ctx, in)
	}
	return in, err
}

// CreateAt makes (or with o.Exclusive unset, replaces) file name in dir and
// opens it for writing. o.Mode is used as given (0 is 0).
func (c *Client) CreateAt(ctx context.Context, dir uint64, name string, o CreateOptions) (*File, error) {
	if err := c.wbIfAny().release(ctx, dir); err != nil {
		return nil, err
	}
	var r mdsproto.OpenResp
	h, sent := newHandle(), time.Now()
	err := c.mutate(ctx, mdsproto.OpCreate, &mdsproto.CreateReq{Dir: dir, Path: name, Mode: o.Mode, Layout: o.Layout,
		SizeHint: o.SizeHint, Exclusive: o.Exclusive, Uid: o.Uid, Gid: o.Gid, Handle: h, Session: c.locks.id}, &r)
	if err != nil {
		return nil, err
	}
	return c.newFile(name, true, h, r, sent)
}

// CreateDeferredAt makes empty file name in dir in a directory this
// client holds a write-back claim on, before the MDS has it (deferred
// true; writeback.go); a writer opens it with OpenIno. With deferred
// false and no error, the caller creates it with CreateAt.
func (c *Client) CreateDeferredAt(ctx context.Context, dir uint64, name string, o CreateOptions) (a Attr, deferred bool, err error) {
	return c.wbIfAny().create(ctx, dir, name, o)
}

// OpenIno opens file ino, for writing too if write is set.
func (c *Client) OpenIno(ctx context.Context, ino uint64, write bool) (*File, error) {
	return c.openIno(ctx, ino, write, 0)
}

// OpenInoWhole opens file ino, made empty under a write-back claim
// (CreateDeferredAt), for a writer that writes all of its size bytes at
// once and closes it. If the MDS has not been sent its create yet, the
// create says the size: a small file is then placed mirrored, as one made
// with CreateOptions.SizeHint, so its close writes one unit per copy
// rather than a coded stripe.
func (c *Client) OpenInoWhole(ctx context.Context, ino uint64, size int64) (*File, error) {
	return c.openIno(ctx, ino, true, size)
}

func (c *Client) openIno(ctx context.Context, ino uint64, write bool, sizeHint int64) (*File, error) {
	h, sent := newHandle(), time.Now()
	req := mdsproto.OpenReq{Ino: ino, Write: write, Handle: h, Session: c.writerSession(write)}
	flushed, err := c.wbIfAny().settleOpen(ctx, ino, req, sizeHint)
	if err != nil {
		return nil, err
	}
	if flushed != nil {
		return c.newFile("", write, h, *flushed, sent) // opened by the flush of its create
	}
	var r mdsproto.OpenResp
	if err := c.mdsWaitBusy(ctx, mdsproto.OpOpen, req, &r); err != nil {
		return nil, err
	}
	return c.newFile("", write, h, r, sent)
}

// RemoveAt removes name from dir: a directory (empty) only if dirOnly,
// anything but a directory otherwise (rmdir and unlink).
func (c *Client) RemoveAt(ctx context.Context, dir uint64, name string, dirOnly bool) error {
	w := c.wbIfAny()
	if !dirOnly {
		if ok, err := w.remove(ctx, dir, name); ok {
			return err
		}
	} else if ok, err := w.rmdir(ctx, dir, name); ok {
		return err
	}
	if err := w.release(ctx, dir); err != nil {
		return err
	}
	want := "file"
	if dirOnly {
		want = "dir"
	}
	return c.mutate(ctx, mdsproto.OpRemove, &mdsproto.PathReq{Dir: dir, Path: name, Want: want}, nil)
}

// RenameAt moves fromDir/from to toDir/to atomically; with noReplace an
// existing target is an error (ErrExists) instead of being replaced.
func (c *Client) RenameAt(ctx context.Context, fromDir uint64, from string, toDir uint64, to string, noReplace bool) error {
	if err := errors.Join(c.wbIfAny().release(ctx, fromDir), c.wbIfAny().release(ctx, toDir)); err != nil {
		return err
	}
	return c.mutate(ctx, mdsproto.OpRename, &mdsproto.RenameReq{FromDir: fromDir, From: from, ToDir: toDir, To: to, NoReplace: noReplace}, nil)
}

// ReadDirAt lists up to limit entries of dir after the name after, in name
// order; more reports whether entries follow.
func (c *Client) ReadDirAt(ctx context.Context, dir uint64, after string, limit int) (entries []DirEntry, more bool, err error) {
	return c.ReadDirXattrAt(ctx, dir, after, limit, "")
}

// ReadDirXattrAt is ReadDirAt with each entry's value of the extended
// attribute xattr in its Xattr (nil where the inode has none).
func (c *Client) ReadDirXattrAt(ctx context.Context, dir uint64, after string, limit int, xattr string) (entries []DirEntry, more bool, err error) {
	if err := c.wbIfAny().settle(ctx, dir, false); err != nil {
		return nil, false, err
	}
	var resp mdsproto.ReaddirResp
	err = c.mds(ctx, mdsproto.OpReaddir, mdsproto.ReaddirReq{Dir: dir, After: after, Limit: limit, Xattr: xattr, Session: c.once.id}, &resp)
	if err != nil || xattr == "" || resp.XattrFilled {
		return resp.Entries, resp.More, err
	}
	// An MDS that predates the field: one request an entry.
	for i, e := range resp.Entries {
		r, err := c.Xattr(ctx, XattrRequest{Ino: e.Inode.Ino, Op: mdsproto.XattrGet, Name: xattr})
		switch {
		case err == nil:
			resp.Entries[i].Xattr = r.Value
		case !errors.Is(err, wire.ErrNoData) && !errors.Is(err, wire.ErrNotFound):
			return nil, false, err
		}
	}
	return resp.Entries, resp.More, nil
}

// Link adds name in dir as another name of file ino.
func (c *Client) Link(ctx context.Context, ino, dir uint64, name string) (Attr, error) {
	if err := errors.Join(c.wbIfAny().leave(ctx, ino), c.wbIfAny().release(ctx, dir)); err != nil {
		return Attr{}, err
	}
	var in Attr
	err := c.mutate(ctx, mdsproto.OpLink, &mdsproto.LinkReq{Ino: ino, Dir: dir, Name: name}, &in)
	return in, err
}

// MknodAt makes name in dir a FIFO, socket or device node (typ is
// TypeFIFO, TypeSocket, TypeCharDev or TypeBlockDev; rdev the device
// number of a device node). It holds no data: the kernel serves its I/O.
func (c *Client) MknodAt(ctx context.Context, dir uint64, name, typ string, mode uint32, rdev uint64, uid, gid uint32) (Attr, error) {
	if err := c.wbIfAny().release(ctx, dir); err != nil {
		return Attr{}, err
	}
	var in Attr
	err := c.mutate(ctx, mdsproto.OpMknod, &mdsproto.MknodReq{Dir: dir, Name: name, Type: typ, Mode: mode, Rdev: rdev, Uid: uid, Gid: gid}, &in)
	return in, err
}

// Symlink makes name in dir a symbolic link to target.
func (c *Client) Symlink(ctx context.Context, dir uint64, name, target string, uid, gid uint32) (Attr, error) {
	if err := c.wbIfAny().release(ctx, dir); err != nil {
		return Attr{}, err
	}
	var in Attr
	err := c.mutate(ctx, mdsproto.OpSymlink, &mdsproto.SymlinkReq{Dir: dir, Name: name, Target: target, Uid: uid, Gid: gid}, &in)
	return in, err
}

// Xattr gets, sets, lists or removes extended attributes of an inode.
func (c *Client) Xattr(ctx context.Context, req XattrRequest) (XattrResult, error) {
	if err := c.wbIfAny().leave(ctx, req.Ino); err != nil {
		return XattrResult{}, err
	}
	var out XattrResult
	var err error
	if req.Op == mdsproto.XattrSet || req.Op == mdsproto.XattrRemove {
		err = c.mutate(ctx, mdsproto.OpXattr, &req, &out)
	} else {
		err = c.mds(ctx, mdsproto.OpXattr, req, &out)
	}
	return out, err
}

// Statfs reports the cluster's capacity.
func (c *Client) Statfs(ctx context.Context) (StatfsResult, error) {
	var out StatfsResult
	err := c.mds(ctx, mdsproto.OpStatfs, struct{}{}, &out)
	return out, err
}

// Ino is the file's inode number.
func (f *File) Ino() uint64 { return f.layoutIno() }

// Attr is the file's attributes as of its open or its last commit (Sync,
// Close), with this handle's size.
func (f *File) Attr() Attr {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.attr
	a.SetStored(f.size, f.sealUnit)
	return a
}
