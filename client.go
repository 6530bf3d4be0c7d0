package braid

import (
	"context"
	"time"

	"github.com/braidfs/braid/internal/checker"
	"github.com/braidfs/braid/internal/client"
	"github.com/braidfs/braid/internal/repairworker"
)

// Client talks to one braid cluster: the MDS for names and layouts, the
// OSDs for data. It is safe for concurrent use.
type Client struct{ c *client.Client }

// Dial connects to the MDS at addr with DefaultOptions.
func Dial(ctx context.Context, addr string) (*Client, error) {
	return DialOptions(ctx, addr, DefaultOptions)
}

// DialOptions connects to the MDS at addr.
func DialOptions(ctx context.Context, addr string, opts Options) (*Client, error) {
	c, err := client.DialOptions(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	return &Client{c: c}, nil
}

// Heal serves the cluster's repair queue until ctx ends: it is assigned
// files by the MDS and rebuilds lost components, catches up components that
// missed writes, moves components off draining OSDs and scrubs. The MDS
// runs repair workers itself; more on other nodes add repair bandwidth.
func (c *Client) Heal(ctx context.Context, o HealOptions) error {
	return repairworker.Serve(ctx, c.c, o)
}

// Check walks every file at or below p and reads every unit of every
// stripe that holds data, verifying that each decodes and that data and
// redundancy agree. It changes nothing (scrub repairs); it is the
// consistency checker for tests and operators (internal/checker).
func (c *Client) Check(ctx context.Context, p string) (CheckReport, error) {
	return checker.Tree(ctx, c.c, p, CheckOptions{})
}

// CheckTree is Check with options.
func (c *Client) CheckTree(ctx context.Context, p string, o CheckOptions) (CheckReport, error) {
	return checker.Tree(ctx, c.c, p, o)
}

// CacheMetadata makes the client answer LookupAt and GetAttr from a cache
// the MDS keeps coherent. onChange, if set, is called (never with the
// cache's lock held) with every inode whose cached attributes were
// dropped because it changed, so a caller that caches further (a
// kernel) can drop its copy too, before the MDS is told it was dropped;
// ino 0 means everything was dropped. self says the change is one this
// client asked for: the MDS keeps the client registered on the inode
// while it runs, so a change by anyone else meanwhile is reported as
// well. It starts a standing request at
// the MDS that lives as long as the client.
func (c *Client) CacheMetadata(onChange func(ino uint64, self bool)) {
	c.c.CacheMetadata(onChange)
}

// CachedEntryFor reports how long the caller (a kernel) may keep the name
// in dir as naming ino: the rest of the lease if the cache holds that
// entry under dir's registration, else 0. A caller that keeps names must
// drop them all when it is told of a change to dir (CacheMetadata's
// onChange), before that call returns.
func (c *Client) CachedEntryFor(dir uint64, name string, ino uint64) time.Duration {
	return c.c.CachedEntryFor(dir, name, ino)
}

// CachedFor reports how long a may be cached further by the caller (a
// kernel): the rest of the lease if the cache holds a's inode as a has
// it, else 0 (the answer was not granted, or has changed since).
func (c *Client) CachedFor(a Attr) time.Duration {
	return c.c.CachedFor(a)
}

// Close releases the client's connections, once what it sent behind its
// callers (a reader's lease release) is answered, or closeNoticeGrace
// passed: a lost release would keep a removed file's objects a lease
// longer. Those requests end before Close returns, and a closed client
// dials nothing: anything still running (a read-ahead) fails at once.
func (c *Client) Close() error {
	return c.c.Close()
}

// Create makes (or replaces) the file at p and opens it for writing.
func (c *Client) Create(ctx context.Context, p string, o CreateOptions) (*File, error) {
	f, err := c.c.Create(ctx, p, o)
	return wrapFile(f), err
}

// CreateAt makes (or with o.Exclusive unset, replaces) file name in dir and
// opens it for writing. o.Mode is used as given (0 is 0).
func (c *Client) CreateAt(ctx context.Context, dir uint64, name string, o CreateOptions) (*File, error) {
	f, err := c.c.CreateAt(ctx, dir, name, o)
	return wrapFile(f), err
}

// CreateDeferredAt makes empty file name in dir in a directory this
// client holds a write-back claim on, before the MDS has it (deferred
// true; writeback.go); a writer opens it with OpenIno. With deferred
// false and no error, the caller creates it with CreateAt.
func (c *Client) CreateDeferredAt(ctx context.Context, dir uint64, name string, o CreateOptions) (a Attr, deferred bool, err error) {
	return c.c.CreateDeferredAt(ctx, dir, name, o)
}

// DrainOSD starts moving every component off OSD id (undo stops it). New
// files avoid a draining OSD at once; Status shows how many components
// are left on it.
func (c *Client) DrainOSD(ctx context.Context, id uint32, undo bool) error {
	return c.c.DrainOSD(ctx, id, undo)
}

// EnableWriteBackNames makes a client that caches metadata claim the
// directories it makes from now on (Options.WriteBackNames).
func (c *Client) EnableWriteBackNames() {
	c.c.EnableWriteBackNames()
}

// GetAttr fetches inode ino's attributes (from the cache, if the client
// caches metadata and holds them).
func (c *Client) GetAttr(ctx context.Context, ino uint64) (Attr, error) {
	return c.c.GetAttr(ctx, ino)
}

// GetLayout reports a file's layout spec or a directory's default.
func (c *Client) GetLayout(ctx context.Context, p string) (LayoutInfo, error) {
	return c.c.GetLayout(ctx, p)
}

// Link adds name in dir as another name of file ino.
func (c *Client) Link(ctx context.Context, ino, dir uint64, name string) (Attr, error) {
	return c.c.Link(ctx, ino, dir, name)
}

// LookupAt finds name in directory dir (from the cache, if the client
// caches metadata and holds it).
func (c *Client) LookupAt(ctx context.Context, dir uint64, name string) (Attr, error) {
	return c.c.LookupAt(ctx, dir, name)
}

// Mkdir creates directory p; with parents, missing parents too and an
// existing directory is not an error.
func (c *Client) Mkdir(ctx context.Context, p string, parents bool) error {
	return c.c.Mkdir(ctx, p, parents)
}

// MkdirAt makes directory name in dir with mode as given (0 is 0).
func (c *Client) MkdirAt(ctx context.Context, dir uint64, name string, mode, uid, gid uint32) (Attr, error) {
	return c.c.MkdirAt(ctx, dir, name, mode, uid, gid)
}

// MknodAt makes name in dir a FIFO, socket or device node (typ is
// TypeFIFO, TypeSocket, TypeCharDev or TypeBlockDev; rdev the device
// number of a device node). It holds no data: the kernel serves its I/O.
func (c *Client) MknodAt(ctx context.Context, dir uint64, name, typ string, mode uint32, rdev uint64, uid, gid uint32) (Attr, error) {
	return c.c.MknodAt(ctx, dir, name, typ, mode, rdev, uid, gid)
}

// Open opens the file at p for reading.
func (c *Client) Open(ctx context.Context, p string) (*File, error) {
	f, err := c.c.Open(ctx, p)
	return wrapFile(f), err
}

// OpenFile opens the existing file at p, for writing too if write is set.
func (c *Client) OpenFile(ctx context.Context, p string, write bool) (*File, error) {
	f, err := c.c.OpenFile(ctx, p, write)
	return wrapFile(f), err
}

// OpenIno opens file ino, for writing too if write is set.
func (c *Client) OpenIno(ctx context.Context, ino uint64, write bool) (*File, error) {
	f, err := c.c.OpenIno(ctx, ino, write)
	return wrapFile(f), err
}

// OpenInoWhole opens file ino, made under a write-back claim
// (CreateDeferredAt) and not yet written, for a writer that writes its
// size bytes at once: a small file is placed mirrored if the MDS has not
// been sent its create yet.
func (c *Client) OpenInoWhole(ctx context.Context, ino uint64, size int64) (*File, error) {
	f, err := c.c.OpenInoWhole(ctx, ino, size)
	return wrapFile(f), err
}

// SyncData makes durable at once what files closed under the async
// write-sync policy wrote (syncfs; otherwise within a second).
func (c *Client) SyncData(ctx context.Context) { c.c.SyncData(ctx) }

// ReadDir lists directory p in name order.
func (c *Client) ReadDir(ctx context.Context, p string) ([]FileInfo, error) {
	return c.c.ReadDir(ctx, p)
}

// ReadDirAt lists up to limit entries of dir after the name after, in name
// order; more reports whether entries follow.
func (c *Client) ReadDirAt(ctx context.Context, dir uint64, after string, limit int) (entries []DirEntry, more bool, err error) {
	return c.c.ReadDirAt(ctx, dir, after, limit)
}

// ReadDirXattrAt is ReadDirAt with each entry's value of the extended
// attribute xattr in its Xattr (nil where the inode has none).
func (c *Client) ReadDirXattrAt(ctx context.Context, dir uint64, after string, limit int, xattr string) (entries []DirEntry, more bool, err error) {
	return c.c.ReadDirXattrAt(ctx, dir, after, limit, xattr)
}

// RecoverMetadata rebuilds a lost namespace from the labels the OSDs keep
// with every object (Swift's scavenging): run it against an MDS started on
// an empty store once the OSDs have registered with it. Force merges into
// a namespace that is not empty.
func (c *Client) RecoverMetadata(ctx context.Context, force bool) (RecoverResult, error) {
	return c.c.RecoverMetadata(ctx, force)
}

// Remove deletes a file or an empty directory. A file's objects are
// deleted from the OSDs in the background.
func (c *Client) Remove(ctx context.Context, p string) error {
	return c.c.Remove(ctx, p)
}

// RemoveAt removes name from dir: a directory (empty) only if dirOnly,
// anything but a directory otherwise (rmdir and unlink).
func (c *Client) RemoveAt(ctx context.Context, dir uint64, name string, dirOnly bool) error {
	return c.c.RemoveAt(ctx, dir, name, dirOnly)
}

// RemoveOSD forgets OSD id. It is refused while the OSD is up or still
// holds components.
func (c *Client) RemoveOSD(ctx context.Context, id uint32) error {
	return c.c.RemoveOSD(ctx, id)
}

// Rename moves from to to atomically, replacing a file or empty directory.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	return c.c.Rename(ctx, from, to)
}

// RenameAt moves fromDir/from to toDir/to atomically; with noReplace an
// existing target is an error (ErrExists) instead of being replaced.
func (c *Client) RenameAt(ctx context.Context, fromDir uint64, from string, toDir uint64, to string, noReplace bool) error {
	return c.c.RenameAt(ctx, fromDir, from, toDir, to, noReplace)
}

// RotateKey makes the MDS sign capabilities with a new key once every up
// OSD holds it; it returns the new key's id and when the keys before it
// stop being accepted (once every capability they signed has expired).
// It needs the administrator.
func (c *Client) RotateKey(ctx context.Context) (uint8, time.Time, error) {
	return c.c.RotateKey(ctx)
}

// S3SigningKey is the SigV4 signing key of an access key for one day
// (yyyymmdd), region and service, and the user it belongs to (its name
// and identity; no secret).
func (c *Client) S3SigningKey(ctx context.Context, access, date, region, service string) (user S3User, key []byte, err error) {
	return c.c.S3SigningKey(ctx, access, date, region, service)
}

// S3UserAdd creates an S3 user with a new access key and secret and a uid
// of its own.
func (c *Client) S3UserAdd(ctx context.Context, name string) (S3User, error) {
	return c.c.S3UserAdd(ctx, name)
}

// S3UserCreate creates the S3 user spec describes, with a new access key
// and secret.
func (c *Client) S3UserCreate(ctx context.Context, spec S3UserSpec) (S3User, error) {
	return c.c.S3UserCreate(ctx, spec)
}

// S3UserRemove deletes an S3 user; its key stops working.
func (c *Client) S3UserRemove(ctx context.Context, name string) error {
	return c.c.S3UserRemove(ctx, name)
}

// S3Users lists the S3 users (without secrets).
func (c *Client) S3Users(ctx context.Context) ([]S3User, error) {
	return c.c.S3Users(ctx)
}

// Scrub queues the files at or below p for verification: every block's
// checksum and every stripe's parity, with what is wrong rewritten from
// redundancy. It returns how many files were queued; Status reports the
// progress (Repair.ScrubQueued, ScrubbedFiles, ScrubRepaired).
func (c *Client) Scrub(ctx context.Context, p string) (int64, error) {
	return c.c.Scrub(ctx, p)
}

// SetAttr changes mode, owner or times (sizes change through File.Truncate).
func (c *Client) SetAttr(ctx context.Context, req SetAttrRequest) (Attr, error) {
	return c.c.SetAttr(ctx, req)
}

// SetLayout sets a directory's default layout (inherited by new files
// below it) or the layout of an empty file.
func (c *Client) SetLayout(ctx context.Context, p, spec string) error {
	return c.c.SetLayout(ctx, p, spec)
}

// Settle makes the name of inode ino durable if this client created it
// in a claimed directory (fsync of a file), and reports changes lost.
func (c *Client) Settle(ctx context.Context, ino uint64) error {
	return c.c.Settle(ctx, ino)
}

// Stat describes the file or directory at p. For files the layout's
// components carry the OSD addresses and states.
func (c *Client) Stat(ctx context.Context, p string) (FileInfo, error) {
	return c.c.Stat(ctx, p)
}

// Statfs reports the cluster's capacity.
func (c *Client) Statfs(ctx context.Context) (StatfsResult, error) {
	return c.c.Statfs(ctx)
}

// Status fetches the cluster map: every OSD with its state and capacity.
func (c *Client) Status(ctx context.Context) (Status, error) {
	return c.c.Status(ctx)
}

// Symlink makes name in dir a symbolic link to target.
func (c *Client) Symlink(ctx context.Context, dir uint64, name, target string, uid, gid uint32) (Attr, error) {
	return c.c.Symlink(ctx, dir, name, target, uid, gid)
}

// SyncDir makes the changes of names in directory dir that this client
// acknowledged durable (fsync of a directory), and reports changes lost.
func (c *Client) SyncDir(ctx context.Context, dir uint64) error {
	return c.c.SyncDir(ctx, dir)
}

// SyncNames makes every change of names this client acknowledged
// durable (syncfs), and reports changes lost.
func (c *Client) SyncNames(ctx context.Context) error {
	return c.c.SyncNames(ctx)
}

// Xattr gets, sets, lists or removes extended attributes of an inode.
func (c *Client) Xattr(ctx context.Context, req XattrRequest) (XattrResult, error) {
	return c.c.Xattr(ctx, req)
}
