// Package client is the engine behind braid's public client API (the
// module's root package): the MDS session with its routing, the metadata
// cache and write-back directory claims, extent locks, and the striped,
// erasure-coded file I/O that reads and writes component objects on the
// OSDs directly and in parallel. Exported names beyond the public API
// serve the other internal packages (the repair worker, the checker) and
// tests; the mount and the gateways use the public API.
package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/reedsolomon"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Options tune a client.
type Options struct {
	// IOTimeout bounds one request to an OSD or the MDS.
	IOTimeout time.Duration
	// Network is how the client reaches the cluster; nil: TCP.
	Network wire.Network
	// Caller is the identity whose permissions the MDS checks for this
	// client's requests (a credential limits which it may be; root
	// becomes nobody where it may not); nil: a limited credential's own
	// first uid and gids, else none (root, for a credential that may act
	// as anyone). WithCaller overrides it for one request.
	Caller *Caller
	// Credential is who the client is to the MDS (internal/auth): its
	// connections to the MDS then speak TLS, and the MDS must show a
	// certificate of the credential's CA. Nil: plain, for an MDS open to
	// anyone (tests in one process).
	Credential *Credential
	// MaxInflightBytes bounds the stripe buffers one open file holds for
	// write-behind and read-ahead.
	MaxInflightBytes int64
	// MaxUnsyncedBytes bounds the written stripes one open file keeps
	// until its OSDs have synced them, to send again if an OSD restarts
	// meanwhile (unsynced.go); past it the file syncs its OSDs.
	MaxUnsyncedBytes int64
	// Sync is the write-sync policy of files that have none of their own
	// (mdsproto.SyncXattr): mdsproto.SyncCluster (also ""), or
	// mdsproto.SyncAsync (async.go).
	Sync string
	// WriteBackLinger is how long names made under a write-back claim
	// wait to be sent in a batch (so a file's open, or the size of one
	// written whole at close, rides with its create); 0: 2 ms.
	WriteBackLinger time.Duration
	// AsyncSyncInterval bounds how long what files closed under the async
	// policy wrote stays not durable while the client lives; 0: a second.
	AsyncSyncInterval time.Duration
	// RepairWait bounds how long a writer waits for a repair of its file
	// (rebuild, drain, scrub) to finish before failing.
	RepairWait time.Duration
	// WriteBackNames lets a client that caches metadata (CacheMetadata)
	// claim the directories it makes and answer creates and unlinks in
	// them before the MDS has them (writeback.go): durable at SyncDir,
	// Settle or SyncNames, as on a local file system.
	WriteBackNames bool
}

// DefaultOptions suit a client on a small machine.
var DefaultOptions = Options{IOTimeout: 30 * time.Second, MaxInflightBytes: 96 << 20, MaxUnsyncedBytes: 64 << 20, RepairWait: 10 * time.Minute}

// Client talks to one braid cluster. It is safe for concurrent use.
type Client struct {
	// mdsAddrs are the MDS processes to try (one active, standbys), and
	// mdsPick the one that answered last.
	mdsAddrs []string
	mdsPick  atomic.Int32
	opts     Options
	conns    *wire.Pool // OSD connections
	mdsPool  *wire.Pool // MDS connections
	self     Caller     // a limited credential's identity (Options.Caller unset)
	hasSelf  bool
	// life ends when the client is closed: open handles stop renewing
	// their leases then, as they would if the process had died.
	life    context.Context
	endLife context.CancelFunc
	once    *onceSession  // names namespace mutations (once.go)
	wb      *writeBack    // write-back claims (writeback.go), under cacheMu
	wbOn    atomic.Bool   // claims are taken (Options.WriteBackNames, EnableWriteBackNames)
	renewer *leaseRenewer // renews open handles' leases, all at once (renew.go)
	// notices are requests sent behind the caller for no longer than
	// the client lives (a reader's lease release, a scrub request);
	// Close waits for them, so none outlives the client.
	notices  sync.WaitGroup
	noticeMu sync.Mutex // orders notify's Add before Close's Wait
	closing  bool       // Close began: notify sends nothing more

	encMu    sync.Mutex
	encoders map[[2]int]reedsolomon.Encoder

	locks *lockSession // extent locks of the handles writing (lock.go)
	// lockSessions are the lock sessions with each of several active MDS
	// processes, by address (lockSessionAt).
	lockSessMu   sync.Mutex
	lockSessions map[string]*lockSession

	cacheMu sync.Mutex
	mdc     *mdCache // names and attributes kept coherent by the MDS (mdcache.go); nil: none

	routes routeState // which MDS process serves which files, with several active (route.go)

	async *asyncSyncer // makes durable what files closed under the async policy wrote (async.go)
}

// Dial connects to the MDS at addr.
func Dial(ctx context.Context, addr string) (*Client, error) {
	return DialOptions(ctx, addr, DefaultOptions)
}

// DialOptions connects with explicit options.
func DialOptions(ctx context.Context, addr string, opts Options) (*Client, error) {
	c := &Client{mdsAddrs: splitAddrs(addr), opts: opts, conns: wire.NewPoolOn(auth.DataNetwork(opts.Network, opts.Credential)), encoders: map[[2]int]reedsolomon.Encoder{}}
	c.mdsPool = wire.NewPoolOn(c.mdsNetwork())
	c.self, c.hasSelf = defaultCaller(opts.Credential)
	c.wbOn.Store(opts.WriteBackNames)
	c.life, c.endLife = context.WithCancel(context.Background())
	c.locks = newLockSession(c)
	c.once = newOnceSession()
	c.async = newAsyncSyncer(c)
	c.renewer = newLeaseRenewer(c)
	if err := c.dialFirst(ctx); err != nil {
		c.conns.Close()
		c.mdsPool.Close()
		c.endLife()
		return nil, fmt.Errorf("braid: connect to MDS: %w", err)
	}
	return c, nil
}

// dialFirst makes the client's first MDS connection. With several MDS
// addresses none may answer for a while (the active died and a standby
// has not yet taken over, within its lease): it tries again, backing off,
// for up to IOTimeout, as requests on a connected client do.
func (c *Client) dialFirst(ctx context.Context) error {
	_, err := c.mdsConn(ctx)
	if err == nil && len(c.mdsAddrs) > 1 {
		c.refreshRoutes(ctx)
	}
	if err == nil || len(c.mdsAddrs) == 1 || c.opts.IOTimeout <= 0 || errors.Is(err, wire.ErrProtocol) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.IOTimeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for attempt := 0; attempt < maxFirstDialAttempts; attempt++ {
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("no MDS of %s answered within %v: %w", strings.Join(c.mdsAddrs, ","), c.opts.IOTimeout, err)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
		if _, err = c.mdsConn(ctx); err == nil || errors.Is(err, wire.ErrProtocol) {
			if err == nil {
				c.refreshRoutes(ctx)
			}
			return err
		}
	}
	return err
}

// maxFirstDialAttempts bounds dialFirst's loop (IOTimeout bounds it first).
const maxFirstDialAttempts = 1000

// mdsConn is the connection to the MDS, dialled if needed: a server that
// answers the handshake as something else is refused (ErrProtocol).
func (c *Client) mdsConn(ctx context.Context) (*wire.Client, error) {
	return c.mdsConnOn(ctx, c.mdsPool)
}

// mdsNetwork is how the client reaches the MDS: over TLS as its
// credential's principal, if it has one.
func (c *Client) mdsNetwork() wire.Network {
	if c.opts.Credential == nil {
		return c.opts.Network
	}
	return auth.Network(c.opts.Network, c.opts.Credential, auth.RoleMDS)
}

// splitAddrs reads "host:port[,host:port...]".
func splitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = []string{s}
	}
	return out
}

// mdsDialTimeout bounds connecting to one of several MDS addresses, so
// that one whose host is gone (connection attempts dropped, not refused)
// does not keep the client from the others.
const mdsDialTimeout = 3 * time.Second

// dialMDS gets a connection to addr, within mdsDialTimeout if there are
// other addresses to try.
func (c *Client) dialMDS(ctx context.Context, pool *wire.Pool, addr string) (*wire.Client, error) {
	if len(c.mdsAddrs) == 1 {
		return pool.Get(ctx, addr)
	}
	dctx, cancel := context.WithTimeout(ctx, mdsDialTimeout)
	defer cancel()
	return pool.Get(dctx, addr)
}

// mdsConnOn is mdsConn from another pool: from the MDS that answered
// last, else the next that answers (a standby took over from it).
func (c *Client) mdsConnOn(ctx context.Context, pool *wire.Pool) (*wire.Client, error) {
	conn, _, err := c.mdsConnAt(ctx, pool)
	return conn, err
}

// mdsConnAt is mdsConnOn, also saying which of mdsAddrs it reached.
func (c *Client) mdsConnAt(ctx context.Context, pool *wire.Pool) (*wire.Client, int, error) {
	start := int(c.mdsPick.Load())
	var firstErr error
	for i := range c.mdsAddrs {
		k := (start + i) % len(c.mdsAddrs)
		addr := c.mdsAddrs[k]
		conn, err := c.dialMDS(ctx, pool, addr)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if errors.Is(err, wire.ErrPoolClosed) || ctx.Err() != nil {
				return nil, 0, err
			}
			continue
		}
		if role := conn.Welcome().Role; role != wire.RoleMDS {
			return nil, 0, wire.Errorf(wire.ErrProtocol, "%s answers as %q, not as the MDS", addr, role)
		}
		c.mdsPick.Store(int32(k))
		return conn, k, nil
	}
	return nil, 0, firstErr
}

// closeNoticeGrace bounds how long Close waits for requests still on
// their way behind the caller (notify) before it cuts them short.
const closeNoticeGrace = time.Second

// Close releases the client's connections, once what it sent behind its
// callers (a reader's lease release) is answered, or closeNoticeGrace
// passed: a lost release would keep a removed file's objects a lease
// longer. Those requests end before Close returns, and a closed client
// dials nothing: anything still running (a read-ahead) fails at once.
func (c *Client) Close() error {
	c.noticeMu.Lock()
	c.closing = true
	c.noticeMu.Unlock()
	sent := make(chan struct{})
	go func() { c.notices.Wait(); close(sent) }()
	t := time.NewTimer(closeNoticeGrace)
	select {
	case <-sent:
	case <-t.C:
	}
	t.Stop()
	if w := c.wbIfAny(); w != nil {
		ctx, cancel := context.WithTimeout(c.life, c.opts.IOTimeout)
		w.releaseAll(ctx)
		cancel()
		defer w.pool.Close()
	}
	c.SyncData(c.life)
	c.endLife()
	c.conns.Close()
	c.mdsPool.Close()
	<-sent
	return nil
}

// notify sends req to the MDS behind the caller, for no longer than the
// client lives; its answer does not matter. A closed client sends
// nothing.
func (c *Client) notify(op uint16, req any) {
	c.noticeMu.Lock()
	defer c.noticeMu.Unlock()
	if c.closing {
		return
	}
	c.notices.Add(1)
	go func() {
		defer c.notices.Done()
		_ = c.mds(c.life, op, req, nil)
	}()
}

func (c *Client) encoder(k, m int) (reedsolomon.Encoder, error) {
	c.encMu.Lock()
	defer c.encMu.Unlock()
	if e, ok := c.encoders[[2]int{k, m}]; ok {
		return e, nil
	}
	e, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, err
	}
	c.encoders[[2]int{k, m}] = e
	return e, nil
}

// mds sends one request to the MDS and decodes the answer into out.
// While the MDS is unreachable (restarting) it retries, backing off, for
// up to IOTimeout, so an MDS restart is a pause, not an error. Namespace
// changes are sent through mutate, named so the MDS applies each once and
// answers a retry with the first attempt's outcome (once.go).
func (c *Client) mds(ctx context.Context, op uint16, req, out any) error {
	meta, err := c.mdsMeta(ctx, op, req)
	if err != nil || out == nil {
		return err
	}
	return mdsproto.Unmarshal(meta, out)
}

// mdsMeta is mds, returning the answer undecoded.
func (c *Client) mdsMeta(ctx context.Context, op uint16, req any) ([]byte, error) {
	return c.mdsMetaOn(ctx, c.mdsPool, op, req)
}

// mdsMetaOn is mdsMeta over a connection from pool.
func (c *Client) mdsMetaOn(ctx context.Context, pool *wire.Pool, op uint16, req any) ([]byte, error) {
	body, err := mdsproto.Marshal(req)
	if err != nil {
		return nil, err
	}
	if who, ok := c.callerFor(ctx); ok {
		body = mdsproto.WithCaller(body, who)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.IOTimeout)
	defer cancel()
	var meta []byte
	backoff := 20 * time.Millisecond
	for attempt := 0; ; attempt++ {
		var conn *wire.Client
		at := -1
		routedTo := c.routeAddr(ctx, req)
		if routedTo != "" {
			conn, err = c.dialMDS(ctx, pool, routedTo)
		} else {
			conn, at, err = c.mdsConnAt(ctx, pool)
		}
		if err == nil {
			meta, _, err = conn.Call(ctx, op, body, nil, nil)
			if err == nil {
				break
			}
			if !c.rerouted(ctx, err, routedTo, req) && !IsConnError(err) && (routedTo != "" || !c.notServing(err, at)) {
				break
			}
		} else if errors.Is(err, wire.ErrPoolClosed) || errors.Is(err, wire.ErrProtocol) || errors.Is(err, wire.ErrDenied) {
			break // the client is closed, or the server will not speak with it: no retry helps
		} else if routedTo != "" {
			c.refreshRoutes(ctx) // the owner is gone: its slots will move
		}
		if attempt == 0 {
			continue // a pooled connection the MDS closed: retry at once
		}
		if ctx.Err() != nil {
			break
		}
		Pause(ctx, backoff)
		backoff = min(2*backoff, time.Second)
	}
	return meta, err
}

// notServing reports whether err is the MDS at mdsAddrs[at] saying it no
// longer serves (it lost its lead; it did nothing): with other MDS
// addresses, the client moves past it, unless another request already
// did, and asks again.
func (c *Client) notServing(err error, at int) bool {
	if !errors.Is(err, wire.ErrNotLeader) || len(c.mdsAddrs) == 1 {
		return false
	}
	n := len(c.mdsAddrs)
	c.mdsPick.CompareAndSwap(int32(at), int32((at+1)%n))
	return true
}

// mdsWaitBusy is mds for requests the MDS may refuse while the file is
// being repaired: it retries, backing off, for up to RepairWait.
func (c *Client) mdsWaitBusy(ctx context.Context, op uint16, req, out any) error {
	deadline := time.Now().Add(c.opts.RepairWait)
	backoff := 50 * time.Millisecond
	for {
		err := c.mds(ctx, op, req, out)
		if !errors.Is(err, wire.ErrBusy) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// FileInfo describes a file, directory, symlink or special file.
type FileInfo struct {
	Name    string
	Ino     uint64
	Type    string // TypeFile, TypeDir, TypeSymlink, TypeFIFO, TypeSocket, TypeCharDev or TypeBlockDev
	IsDir   bool
	Size    int64
	Mode    fs.FileMode // permission, set-ID and sticky bits, and the type as io/fs spells it
	ModTime time.Time
	Nlink   uint32
	Uid     uint32
	Gid     uint32
	Rdev    uint64  // device nodes: the device number, encoded as stat's st_rdev
	Target  string  // symlinks
	Layout  *Layout // files only
}

// fileModeTypes are io/fs's type bits for braid's inode types.
var fileModeTypes = map[string]fs.FileMode{
	mdsproto.TypeDir:      fs.ModeDir,
	mdsproto.TypeSymlink:  fs.ModeSymlink,
	mdsproto.TypeFIFO:     fs.ModeNamedPipe,
	mdsproto.TypeSocket:   fs.ModeSocket,
	mdsproto.TypeCharDev:  fs.ModeDevice | fs.ModeCharDevice,
	mdsproto.TypeBlockDev: fs.ModeDevice,
}

// fileMode is mode (POSIX bits) and typ as an io/fs FileMode.
func fileMode(typ string, mode uint32) fs.FileMode {
	m := fs.FileMode(mode&0o777) | fileModeTypes[typ]
	if mode&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// Layout is a file's placed layout.
type Layout struct {
	Spec       string
	Groups     int
	Version    uint64
	Components []Component
}

// Component is one object of a file.
type Component struct {
	Index int
	Group int
	OSD   uint32
	Addr  string
	Up    bool
	Dirty bool // missed writes or found lost: read by reconstruction until a healer rewrites it
}

func infoOf(name string, in mdsproto.Inode, eps map[uint32]mdsproto.Endpoint) FileInfo {
	fi := FileInfo{Name: name, Ino: in.Ino, Type: in.Type, IsDir: in.Type == mdsproto.TypeDir, Size: in.Size,
		Mode: fileMode(in.Type, in.Mode), ModTime: time.Unix(0, in.MtimeNs), Nlink: in.Nlink,
		Uid: in.Uid, Gid: in.Gid, Rdev: in.Rdev, Target: in.Target}
	if l := in.Layout; l != nil {
		fi.Layout = &Layout{Spec: l.Spec, Groups: l.Groups, Version: l.Version}
		width := len(l.OSDs) / max(1, l.Groups)
		for i, id := range l.OSDs {
			comp := Component{Index: i, Group: i / max(1, width), OSD: id, Dirty: slices.Contains(in.Dirty, uint32(i))}
			if ep, ok := eps[id]; ok {
				comp.Addr, comp.Up = ep.Addr, ep.Up
			}
			fi.Layout.Components = append(fi.Layout.Components, comp)
		}
	}
	return fi
}

// Stat describes the file or directory at p. For files the layout's
// components carry the OSD addresses and states.
func (c *Client) Stat(ctx context.Context, p string) (FileInfo, error) {
	var st mdsproto.StatResp
	if err := c.mds(ctx, mdsproto.OpStat, mdsproto.PathReq{Path: p}, &st); err != nil {
		return FileInfo{}, err
	}
	return infoOf(path.Base(path.Clean("/"+p)), st.Inode, st.Endpoints), nil
}

// Mkdir creates directory p; with parents, missing parents too and an
// existing directory is not an error.
func (c *Client) Mkdir(ctx context.Context, p string, parents bool) error {
	return c.mutate(ctx, mdsproto.OpMkdir, &mdsproto.MkdirReq{Path: p, Parents: parents, Mode: 0o755}, nil)
}

// ReadDir lists directory p in name order.
func (c *Client) ReadDir(ctx context.Context, p string) ([]FileInfo, error) {
	var out []FileInfo
	after := ""
	for {
		var resp mdsproto.ReaddirResp
		if err := c.mds(ctx, mdsproto.OpReaddir, mdsproto.ReaddirReq{Path: p, After: after}, &resp); err != nil {
			return nil, err
		}
		for _, e := range resp.Entries {
			out = append(out, infoOf(e.Name, e.Inode, nil))
			after = e.Name
		}
		if !resp.More || len(resp.Entries) == 0 {
			return out, nil
		}
	}
}

// Remove deletes a file or an empty directory. A file's objects are
// deleted from the OSDs in the background.
func (c *Client) Remove(ctx context.Context, p string) error {
	return c.mutate(ctx, mdsproto.OpRemove, &mdsproto.PathReq{Path: p}, nil)
}

// Rename moves from to to atomically, replacing a file or empty directory.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	return c.mutate(ctx, mdsproto.OpRename, &mdsproto.RenameReq{From: from, To: to}, nil)
}

// LayoutInfo is what `braid layout get` shows.
type LayoutInfo struct {
	Spec     string // the file's spec, or the spec new files in the directory get
	Explicit bool   // directory: set on this directory rather than inherited
}

// SetLayout sets a directory's default layout (inherited by new files
// below it) or the layout of an empty file.
func (c *Client) SetLayout(ctx context.Context, p, spec string) error {
	if _, err := layout.Parse(spec); err != nil {
		return err
	}
	return c.mds(ctx, mdsproto.OpSetLayout, mdsproto.SetLayoutReq{Path: p, Spec: spec}, nil)
}

// GetLayout reports a file's layout spec or a directory's default.
func (c *Client) GetLayout(ctx context.Context, p string) (LayoutInfo, error) {
	var r mdsproto.GetLayoutResp
	err := c.mds(ctx, mdsproto.OpGetLayout, mdsproto.PathReq{Path: p}, &r)
	return LayoutInfo{Spec: r.Spec, Explicit: r.Explicit}, err
}

// Status is the cluster map and capacity.
type Status = mdsproto.StatusResp

// PendingDelete is the space removed files still hold (Status.PendingDelete).
type PendingDelete = mdsproto.PendingDelete

// Status fetches the cluster map: every OSD with its state and capacity.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.mds(ctx, mdsproto.OpStatus, struct{}{}, &s)
	return s, err
}

// Scrub queues the files at or below p for verification: every block's
// checksum and every stripe's parity, with what is wrong rewritten from
// redundancy. It returns how many files were queued; Status reports the
// progress (Repair.ScrubQueued, ScrubbedFiles, ScrubRepaired).
func (c *Client) Scrub(ctx context.Context, p string) (int64, error) {
	var r mdsproto.ScrubResp
	err := c.mds(ctx, mdsproto.OpScrub, mdsproto.ScrubReq{Path: p}, &r)
	return r.Files, err
}

// DrainOSD starts moving every component off OSD id (undo stops it). New
// files avoid a draining OSD at once; Status shows how many components
// are left on it.
func (c *Client) DrainOSD(ctx context.Context, id uint32, undo bool) error {
	return c.mds(ctx, mdsproto.OpOSDDrain, mdsproto.DrainReq{ID: id, Undo: undo}, nil)
}

// RemoveOSD forgets OSD id. It is refused while the OSD is up or still
// holds components.
func (c *Client) RemoveOSD(ctx context.Context, id uint32) error {
	return c.mds(ctx, mdsproto.OpOSDRemove, mdsproto.DrainReq{ID: id}, nil)
}

// RotateKey makes the MDS sign capabilities with a new key once every up
// OSD holds it; it returns the new key's id and when the keys before it
// stop being accepted (once every capability they signed has expired).
// It needs the administrator.
func (c *Client) RotateKey(ctx context.Context) (uint8, time.Time, error) {
	var r mdsproto.KeyRotateResp
	if err := c.mds(ctx, mdsproto.OpKeyRotate, struct{}{}, &r); err != nil {
		return 0, time.Time{}, err
	}
	return r.ID, time.Unix(0, r.RetireNs), nil
}

// RecoverResult is what RecoverMetadata restored.
type RecoverResult = mdsproto.RecoverResp

// RecoverMetadata rebuilds a lost namespace from the labels the OSDs keep
// with every object (Swift's scavenging): run it against an MDS started on
// an empty store once the OSDs have registered with it. Force merges into
// a namespace that is not empty.
func (c *Client) RecoverMetadata(ctx context.Context, force bool) (RecoverResult, error) {
	var r RecoverResult
	err := c.mds(ctx, mdsproto.OpRecover, mdsproto.RecoverReq{Force: force}, &r)
	return r, err
}
