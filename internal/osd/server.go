package osd

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/durable"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Config configures an OSD.
type Config struct {
	Dir     string
	Listen  string       // host:port; port 0 picks one
	Network wire.Network // nil: TCP
	// Credential is who the OSD is to the MDS (role osd): heartbeats go
	// over TLS as it. Nil: plain, to an open MDS.
	Credential *auth.Credential
	// TLS serves the data path over TLS too, as Credential, to principals
	// of its CA only; the OSD then announces its address with
	// auth.TLSScheme so clients know. Needs Credential.
	TLS            bool
	MDSAddr        string
	Key            capability.Key
	CapacityBytes  int64 // 0: the file system's size
	HeartbeatEvery time.Duration
	Log            *slog.Logger
	Now            func() time.Time
	FS             FS // nil: the real disk
	// WriteCache keeps every write in the page cache (buffered) instead of
	// sending large aligned writes straight to the disk (direct.go).
	WriteCache bool
	// NoPack makes new objects files of their own instead of packing the
	// small ones (pack.go); packed objects are still read. For measuring.
	NoPack  bool
	OnFatal func(error) // must stop the process; nil panics
	// Host and Rack name the OSD's failure domains: placement keeps a
	// parity group's components in distinct hosts and racks where the
	// cluster allows. "": not said (a host of its own).
	Host, Rack string
}

const superblockName = "braid-osd.json"

// superblockFormat 2: the store has a pack (pack.go); 1: objects are
// files only, as binaries before the pack wrote and read.
const superblockFormat = 2

type superblock struct {
	Format int    `json:"format"`
	UUID   string `json:"uuid"`
	OSDID  uint32 `json:"osd_id"`
}

// Server is a running OSD.
type Server struct {
	cfg    Config
	keys   *capability.Ring // capability keys: the key file's, then the MDS's (heartbeats)
	store  *Store
	wsrv   *wire.Server
	ln     net.Listener
	sb     superblock
	boot   uint64 // this process's incarnation (osdproto: Write and Sync replies)
	id     atomic.Uint32
	stop   context.CancelFunc
	wg     sync.WaitGroup
	served [32]atomic.Uint64 // requests taken, by op (Served)
}

// Start opens the OSD's directory, listens, and begins heartbeating.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HeartbeatEvery == 0 {
		cfg.HeartbeatEvery = time.Second
	}
	if cfg.OnFatal == nil {
		cfg.OnFatal = func(err error) { panic(err) }
	}
	if cfg.FS == nil {
		cfg.FS = OSFS{}
	}
	// File data is the users': no other local user reads it from disk.
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	sb, err := loadSuperblock(cfg.Dir)
	if err != nil {
		return nil, err
	}
	fsys := cfg.FS
	store, err := OpenStore(fsys, cfg.Dir, cfg.OnFatal)
	if err != nil {
		return nil, err
	}
	store.direct = store.direct && !cfg.WriteCache
	store.SetPacking(!cfg.NoPack)
	if cfg.CapacityBytes > 0 {
		// Enforce the configured capacity as a disk of that size would.
		store.fs = NewLimitFS(fsys, cfg.CapacityBytes, store.UsedBytes())
		store.pack.fs = store.fs // the pack's segments count too
	}
	ln, err := wire.OrTCP(cfg.Network).Listen(cfg.Listen)
	if err != nil {
		store.Close()
		return nil, err
	}
	if cfg.TLS {
		if cfg.Credential == nil {
			ln.Close()
			store.Close()
			return nil, fmt.Errorf("an OSD serves TLS only with a credential")
		}
		ln = tls.NewListener(ln, cfg.Credential.ServerTLS())
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{cfg: cfg, store: store, ln: ln, sb: sb, stop: cancel, boot: newBoot(), keys: capability.NewRing(cfg.Key)}
	s.id.Store(sb.OSDID)
	s.wsrv = wire.NewServer(s.handle, cfg.Log, wire.DefaultLimits)
	// A request's capability is checked before its data is read or held:
	// forged or expired requests that announce megabytes take none of the
	// in-flight budget real writers wait on.
	s.wsrv.Admit(func(op uint16, meta []byte) (any, error) { return s.authorized(op, meta) })
	s.wsrv.Identify(wire.RoleOSD, 0)
	s.wg.Add(3)
	go func() { defer s.wg.Done(); _ = s.wsrv.Serve(ctx, ln) }()
	go func() { defer s.wg.Done(); s.heartbeatLoop(ctx) }()
	go func() { defer s.wg.Done(); s.maintainLoop(ctx) }()
	return s, nil
}

// newBoot draws a random, nonzero boot id: a restarted OSD must never
// answer with the boot of an earlier process, whose unsynced writes a
// power cut may have dropped.
func newBoot() uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if boot := binary.LittleEndian.Uint64(b[:]); boot != 0 {
			return boot
		}
	}
}

func loadSuperblock(dir string) (superblock, error) {
	path := filepath.Join(dir, superblockName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		var u [16]byte
		_, _ = rand.Read(u[:])
		sb := superblock{Format: superblockFormat, UUID: hex.EncodeToString(u[:])}
		return sb, writeSuperblock(dir, sb)
	}
	if err != nil {
		return superblock{}, err
	}
	var sb superblock
	if err := json.Unmarshal(b, &sb); err != nil || sb.Format < 1 || sb.Format > superblockFormat || sb.UUID == "" {
		return superblock{}, fmt.Errorf("%s: not a braid OSD superblock (format 1 or %d)", path, superblockFormat)
	}
	if sb.Format < superblockFormat {
		// From here on the store may pack objects: a binary from before
		// the pack would not see them, so it must refuse the directory.
		sb.Format = superblockFormat
		if err := writeSuperblock(dir, sb); err != nil {
			return superblock{}, err
		}
	}
	return sb, nil
}

func writeSuperblock(dir string, sb superblock) error {
	b, _ := json.Marshal(sb)
	return durable.WriteFile(filepath.Join(dir, superblockName), b, 0o600)
}

// Addr is the address the OSD listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// announced is the address the OSD gives the MDS for clients: with
// auth.TLSScheme when it serves TLS.
func (s *Server) announced() string {
	if s.cfg.TLS {
		return auth.TLSScheme + s.Addr()
	}
	return s.Addr()
}

// ID is the OSD id the MDS assigned (0 until the first heartbeat answer).
func (s *Server) ID() uint32 { return s.id.Load() }

// Store exposes the object store (tests, scrub).
func (s *Server) Store() *Store { return s.store }

// Close stops serving and heartbeating.
func (s *Server) Close() {
	s.stop()
	s.wsrv.Close()
	s.wg.Wait()
	s.store.Close()
}

// UUID is the OSD's own name, kept in its superblock.
func (s *Server) UUID() string { return s.sb.UUID }

func rightsFor(op uint16) capability.Rights {
	switch op {
	case osdproto.OpRead, osdproto.OpStat, osdproto.OpScan, osdproto.OpDataMap:
		return capability.Read
	}
	return capability.Write
}

// Served is how many requests of op this OSD has taken.
func (s *Server) Served(op uint16) uint64 {
	if int(op) >= len(s.served) {
		return 0
	}
	return s.served[op].Load()
}

func (s *Server) handle(ctx context.Context, r *wire.Request) (wire.Response, error) {
	if int(r.Op) < len(s.served) {
		s.served[r.Op].Add(1)
	}
	req, ok := r.Admitted.(osdproto.Req) // checked before its data was read
	if !ok {
		var err error
		if req, err = s.authorized(r.Op, r.Meta); err != nil {
			return wire.Response{}, err
		}
	}
	ver := req.Cap.Version
	key := ObjKey{Ino: req.Ino, Comp: req.Comp}
	switch r.Op {
	case osdproto.OpWrite:
		created, err := s.store.Write(key, ver, req.Off, r.Data, req.Flags)
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Meta: osdproto.WriteReply{Boot: s.boot, Created: created}.Encode()}, nil
	case osdproto.OpRead:
		if req.Len > wire.MaxDataBytes {
			return wire.Response{}, wire.Errorf(wire.ErrBadRequest, "read of %d bytes exceeds %d", req.Len, wire.MaxDataBytes)
		}
		buf := wire.GetBuf(int(req.Len))
		size, v, err := s.store.Read(key, ver, req.Off, buf)
		if err != nil {
			wire.PutBuf(buf)
			return wire.Response{}, err
		}
		info := osdproto.ObjectInfo{Len: size, Version: v, Boot: s.boot}
		return wire.Response{Meta: info.Encode(), Data: buf, Release: func() { wire.PutBuf(buf) }}, nil
	case osdproto.OpSync:
		if err := eachComp(req, ver, s.store.Sync); err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Meta: osdproto.EncodeBoot(s.boot)}, nil
	case osdproto.OpSyncAll:
		if err := s.store.SyncAll(); err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Meta: osdproto.EncodeBoot(s.boot)}, nil
	case osdproto.OpTruncate:
		created, err := s.store.Truncate(key, ver, req.Off, req.Flags)
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Meta: osdproto.WriteReply{Boot: s.boot, Created: created}.Encode()}, nil
	case osdproto.OpDelete:
		return wire.Response{}, s.store.DeleteComps(req.Ino, req.Comps, ver)
	case osdproto.OpStage:
		segs := req.SegsOf(len(r.Data))
		total := int64(0)
		for _, g := range segs {
			total += g.DataLen()
		}
		last := segs[len(segs)-1]
		if total != int64(len(r.Data)) || last.Off+int64(last.Len) > osdproto.MaxObjectBytes {
			return wire.Response{}, wire.Errorf(wire.ErrBadRequest, "stage of %d bytes in segments of %d, or past the object size limit", len(r.Data), total)
		}
		return wire.Response{}, s.store.StageSegs(key, ver, req.Txid, segs, r.Data)
	case osdproto.OpApply:
		created, err := s.store.Apply(key, ver, req.Txid, req.Flags)
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Meta: osdproto.WriteReply{Boot: s.boot, Created: created}.Encode()}, nil
	case osdproto.OpAbort:
		return wire.Response{}, s.store.Abort(key, req.Txid)
	case osdproto.OpLabel:
		return wire.Response{}, eachComp(req, ver, func(k ObjKey, v uint64) error { return s.store.SetLabel(k, v, r.Data) })
	case osdproto.OpLabels:
		return wire.Response{}, s.setLabels(req, r.Data)
	case osdproto.OpScan:
		return s.scan(req)
	case osdproto.OpStat:
		size, v, err := s.store.Stat(key)
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Meta: osdproto.ObjectInfo{Len: size, Version: v, Boot: s.boot}.Encode()}, nil
	case osdproto.OpDataMap:
		bits, size, v, err := s.store.DataMap(key, ver, req.Off, int64(req.Len), int(req.Units))
		if err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Meta: osdproto.ObjectInfo{Len: size, Version: v, Boot: s.boot}.Encode(), Data: bits}, nil
	}
	return wire.Response{}, wire.Errorf(wire.ErrUnknownOp, "osd op %d", r.Op)
}

// authorized decodes a request's meta and checks its capability.
func (s *Server) authorized(op uint16, meta []byte) (osdproto.Req, error) {
	req, err := osdproto.Decode(op, meta)
	if err != nil {
		return req, err
	}
	if err := s.keys.Check(req.Cap, req.Ino, rightsFor(op), s.cfg.Now()); err != nil {
		return req, fmt.Errorf("%w: %v", wire.ErrDenied, err)
	}
	return req, nil
}

// setLabels writes each entry's label on its file's objects. It needs a
// capability for ino 0, which only the MDS issues. A label that cannot
// be written (an object of a newer layout, a full disk) does not keep
// the others from being written; the first such error is the answer
// (labels are written again when a file changes).
func (s *Server) setLabels(req osdproto.Req, data []byte) error {
	if req.Ino != 0 {
		return wire.Errorf(wire.ErrDenied, "labels of many files need a capability for the whole OSD")
	}
	total := 0
	for _, l := range req.Labels {
		total += int(l.Len)
	}
	if total != len(data) {
		return wire.Errorf(wire.ErrBadRequest, "label entries of %d bytes in %d bytes of data", total, len(data))
	}
	off := 0
	var first error
	for _, l := range req.Labels {
		label := data[off : off+int(l.Len)]
		off += int(l.Len)
		for _, c := range l.Comps {
			if err := s.store.SetLabel(ObjKey{Ino: l.Ino, Comp: c}, l.Version, label); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// scan lists a page of objects with their labels. It needs a capability
// for ino 0, which only the MDS issues (to itself, for recovery).
func (s *Server) scan(req osdproto.Req) (wire.Response, error) {
	if req.Ino != 0 {
		return wire.Response{}, wire.Errorf(wire.ErrDenied, "scan needs a capability for the whole OSD")
	}
	entries, next, err := s.store.ScanLabels(string(req.Cursor), int(max(1, req.Len)))
	if err != nil {
		return wire.Response{}, err
	}
	out := make([]osdproto.ScanEntry, 0, len(entries))
	size := 0
	for _, e := range entries {
		// The label is the MDS's, opaque here (sent base64, 4/3 its size).
		se := osdproto.ScanEntry{Ino: e.Key.Ino, Comp: e.Key.Comp, Version: e.Version, Len: e.Len, Label: e.Label}
		if size += len(se.Label)*4/3 + 128; size > wire.MaxDataBytes/2 {
			break // the rest comes with the next page
		}
		out = append(out, se)
	}
	if len(out) < len(entries) && len(out) > 0 {
		next = entries[len(out)-1].Cursor
	}
	b, err := json.Marshal(out)
	if err != nil {
		return wire.Response{}, fmt.Errorf("%w: %v", wire.ErrInternal, err)
	}
	return wire.Response{Meta: []byte(next), Data: b}, nil
}

// eachComp applies op to every component a request names, stopping at
// the first failure.
func eachComp(req osdproto.Req, ver uint64, op func(ObjKey, uint64) error) error {
	for _, c := range req.Comps {
		if err := op(ObjKey{Ino: req.Ino, Comp: c}, ver); err != nil {
			return err
		}
	}
	return nil
}

// mdsDialTimeout bounds connecting to one MDS address: one whose host is
// gone must not keep the OSD from the next.
const mdsDialTimeout = 3 * time.Second

// heartbeatTimeout bounds one heartbeat's answer: the MDS answers from
// memory, so one that takes longer is paused or gone, and with several
// MDS addresses the OSD moves on to the next.
const heartbeatTimeout = 3 * time.Second

// maxHeartbeatTimeouts is how many heartbeats in a row an MDS may leave
// unanswered before an OSD with other MDS addresses moves to the next.
const maxHeartbeatTimeouts = 2

// Background upkeep of the store, each heartbeat interval: at most
// compactionsPerTick segments compacted, migratedPerTick objects moved
// into the pack.
const (
	compactionsPerTick = 4
	migratedPerTick    = 512
)

// maintainLoop makes durable what was written without a sync (so a
// writer under the async policy that died loses nothing past a
// heartbeat: syncall.go), compacts the pack and migrates small file
// objects into it until ctx ends. A failure is logged and tried again
// at the next tick.
func (s *Server) maintainLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.HeartbeatEvery)
	defer t.Stop()
	migrating := !s.cfg.NoPack
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.store.SyncAll(); err != nil {
			s.cfg.Log.Warn("syncing writes taken without a sync", "err", err)
		}
		for range compactionsPerTick {
			if did, err := s.store.Compact(); err != nil || !did {
				if err != nil {
					s.cfg.Log.Warn("pack compaction", "err", err)
				}
				break
			}
		}
		if migrating {
			n, more, err := s.store.Migrate(migratedPerTick)
			if err != nil {
				s.cfg.Log.Warn("moving small objects into the pack", "err", err)
			} else if n > 0 {
				s.cfg.Log.Info("moved small objects into the pack", "objects", n)
			}
			migrating = more || err != nil
		}
	}
}

// heartbeatLoop reports to the MDS every HeartbeatEvery until ctx ends,
// reconnecting whenever the MDS is unreachable.
func (s *Server) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.HeartbeatEvery)
	defer t.Stop()
	var mds *wire.Client
	defer func() {
		if mds != nil {
			mds.Close()
		}
	}()
	// MDSAddr may name several MDS processes (one active, standbys that
	// do not listen): an unreachable one is passed for the next.
	addrs, pick := strings.Split(s.cfg.MDSAddr, ","), 0
	timeouts := 0 // heartbeats in a row the current MDS did not answer in time
	passed := 0   // MDS processes passed since the last tick for answering ErrNotLeader
	for {
		// An address that refuses (a standby, not listening) is passed for
		// the next at once, each at most once a round.
		for try := 0; try < len(addrs) && (mds == nil || mds.Err() != nil); try++ {
			if mds != nil {
				mds.Close()
			}
			var err error
			addr := strings.TrimSpace(addrs[pick%len(addrs)])
			dctx, cancel := context.WithTimeout(ctx, mdsDialTimeout)
			mds, err = wire.DialOn(dctx, s.mdsNetwork(), addr)
			cancel()
			if err == nil && mds.Welcome().Role != wire.RoleMDS {
				err = wire.Errorf(wire.ErrProtocol, "%s answers as %q, not as the MDS", addr, mds.Welcome().Role)
				mds.Close()
			}
			if err != nil {
				pick++
				mds = nil
				if errors.Is(err, wire.ErrProtocol) {
					s.cfg.Log.Warn("cannot heartbeat", "mds", s.cfg.MDSAddr, "err", err)
				}
			}
			timeouts = 0
		}
		if mds != nil {
			err := s.heartbeat(ctx, mds)
			switch {
			case err == nil || ctx.Err() != nil:
				timeouts = 0
			case errors.Is(err, wire.ErrNotLeader):
				timeouts = maxHeartbeatTimeouts // deposed, or not the leader of several: move on now
				passed++
			case errors.Is(err, context.DeadlineExceeded):
				timeouts++
			}
			if err != nil && ctx.Err() == nil {
				s.cfg.Log.Debug("heartbeat failed", "mds", s.cfg.MDSAddr, "err", err)
			}
			if len(addrs) > 1 && timeouts >= maxHeartbeatTimeouts {
				// Paused or deposed while its connection stays open: ask
				// the next MDS (a standby that took over).
				mds.Close()
				mds, pick = nil, pick+1
				if errors.Is(err, wire.ErrNotLeader) && passed < len(addrs) {
					continue // the next at once: it may be the leader
				}
			}
		}
		passed = 0
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) heartbeat(ctx context.Context, mds *wire.Client) error {
	total, avail, err := s.store.fs.Statfs(s.cfg.Dir)
	if err != nil {
		return err
	}
	used := s.store.UsedBytes()
	capacity := total
	if s.cfg.CapacityBytes > 0 {
		capacity = s.cfg.CapacityBytes
	}
	hb := mdsproto.HeartbeatReq{UUID: s.sb.UUID, ID: s.id.Load(), Addr: s.announced(), CapacityBytes: capacity,
		UsedBytes: used, FreeBytes: max(0, min(avail, capacity-used)), Pid: os.Getpid(), TimeNs: s.cfg.Now().UnixNano()}
	if disk := diskOf(s.cfg.Dir); disk != "" {
		hb.Disk, hb.DiskBytes, hb.DiskFreeBytes = disk, total, avail
	}
	hb.Host, hb.Rack = s.cfg.Host, s.cfg.Rack
	hb.Sig = s.keys.Sign("heartbeat", hb.SignedBytes())
	keys, _ := s.keys.Keys()
	for id := range keys {
		hb.KeysHeld |= 1 << id
	}
	body, err := mdsproto.Marshal(&hb)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	meta, _, err := mds.Call(cctx, mdsproto.OpHeartbeat, body, nil, nil)
	if err != nil {
		return err
	}
	var resp mdsproto.HeartbeatResp
	if err := mdsproto.Unmarshal(meta, &resp); err != nil {
		return err
	}
	if len(resp.Keys) > 0 {
		ring := map[uint8]capability.Key{}
		for _, k := range resp.Keys {
			ring[k.ID] = capability.Key(k.Key)
		}
		if !s.keys.Set(ring, resp.KeyCurrent) {
			s.cfg.Log.Warn("the MDS sent capability keys this OSD cannot take", "keys", len(resp.Keys), "current", resp.KeyCurrent)
		}
	}
	if resp.ID != 0 && resp.ID != s.sb.OSDID {
		s.sb.OSDID = resp.ID
		if err := writeSuperblock(s.cfg.Dir, s.sb); err != nil {
			return err
		}
		s.id.Store(resp.ID)
	}
	return nil
}

// mdsNetwork is how the OSD reaches the MDS: over TLS as its credential's
// principal, if it has one.
func (s *Server) mdsNetwork() wire.Network {
	if s.cfg.Credential == nil {
		return s.cfg.Network
	}
	return auth.Network(s.cfg.Network, s.cfg.Credential, auth.RoleMDS)
}

// diskOf names the file system dir is on, as this machine and the file
// system's device: OSDs in directories of one disk name it alike, so
// status counts its space once. "" when it cannot tell (then the OSD's
// space is counted as its own).
func diskOf(dir string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", machineID(), st.Dev)
}

// machineID names this machine: its host name and systemd's machine id
// (VMs cloned from one image may share the id).
func machineID() string {
	host, _ := os.Hostname()
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return host + "/" + string(bytes.TrimSpace(b))
	}
	return host
}
