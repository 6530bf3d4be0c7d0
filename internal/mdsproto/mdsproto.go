// Package mdsproto defines the MDS's operations: op codes and the bodies
// of requests and responses, carried in the meta section of internal/wire
// frames. Bodies are format 2: CBOR maps keyed by each field's json name,
// with strings as byte strings (codec.go says why); fields a peer does
// not know are skipped, so messages extend by adding fields. Bulk data
// never travels here; bodies are bounded by wire.MaxMetaBytes.
package mdsproto

import (
	"fmt"
	"slices"
	"strings"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/seal"
)

// Op codes.
const (
	OpHeartbeat uint16 = 100 + iota
	OpLookup
	OpMkdir
	OpCreate
	OpOpen
	OpCommit
	OpReaddir
	OpRemove
	OpRename
	OpSetLayout
	OpGetLayout
	OpStatus
	OpMarkDirty
	OpRepairAssign
	OpRepairDone
	OpScrub
	OpOSDDrain
	OpOSDRemove
	OpIntentBegin
	OpIntentCommit
	OpIntentDone
	OpRenew
	OpRecover
	OpSetattr
	OpLink
	OpSymlink
	OpXattr
	OpStatfs
	OpS3UserAdd
	OpS3UserList
	OpS3UserRemove
	OpS3SigningKey
	OpExtentLock
	OpExtentRelease
	OpLockWait
	OpExtentReclaim
	OpMknod
	OpStat
	OpRenewBatch
	OpCacheWait
	OpCacheLookup
	OpKeyRotate
	// OpRoute answers the routing table (Routing) the MDS serves by:
	// with several active processes, clients send a file's requests to
	// its slot's owner.
	OpRoute
	// OpDirClaim and OpDirFlush: write-back of a directory's names
	// (claim.go).
	OpDirClaim
	OpDirFlush
)

// ValidName reports whether name can be one directory entry's: 1 to
// 255 bytes, neither "." nor "..", without '/' or NUL. Any other bytes
// are a name's own (names are bytes, not text).
func ValidName(name string) bool {
	return name != "" && len(name) <= 255 && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}

// File types. FIFOs, sockets and device nodes are inodes only: the
// kernel serves their I/O, and their data never touches the OSDs.
const (
	TypeFile     = "file"
	TypeDir      = "dir"
	TypeSymlink  = "symlink"
	TypeFIFO     = "fifo"
	TypeSocket   = "socket"
	TypeCharDev  = "chardev"
	TypeBlockDev = "blockdev"
)

// KilledOnWrite is what a write by an unprivileged user clears from the
// mode of a file of group gid (Linux's setattr_should_drop_suidgid):
// set-user-ID always; set-group-ID with group execute, or without it when
// the writer is not in the file's group. The mount decides by it whether
// to ask; the MDS applies it to the mode it holds.
func KilledOnWrite(mode, gid uint32, writerGroups []uint32) uint32 {
	kill := mode & 0o4000
	if mode&0o2000 != 0 && (mode&0o010 != 0 || !slices.Contains(writerGroups, gid)) {
		kill |= 0o2000
	}
	return kill
}

// IsSpecial reports whether typ is a FIFO, socket or device node.
func IsSpecial(typ string) bool {
	switch typ {
	case TypeFIFO, TypeSocket, TypeCharDev, TypeBlockDev:
		return true
	}
	return false
}

// Layout is a placed layout as sent on the wire.
type Layout struct {
	Spec    string   `json:"spec"`
	Groups  int      `json:"groups"`
	OSDs    []uint32 `json:"osds"`
	Version uint64   `json:"version"`
}

// Decode validates l and returns the layout package's form.
func (l *Layout) Decode() (layout.Layout, error) {
	spec, err := layout.Parse(l.Spec)
	if err != nil {
		return layout.Layout{}, err
	}
	out := layout.Layout{Spec: spec, Groups: l.Groups, OSDs: l.OSDs, Version: l.Version}
	return out, out.Validate()
}

// Inode is a file's or directory's attributes.
type Inode struct {
	Ino       uint64  `json:"ino"`
	Type      string  `json:"type"`
	Mode      uint32  `json:"mode"`
	Size      int64   `json:"size"`
	Nlink     uint32  `json:"nlink"`
	MtimeNs   int64   `json:"mtime_ns"`
	CtimeNs   int64   `json:"ctime_ns"`
	AtimeNs   int64   `json:"atime_ns,omitempty"`
	Uid       uint32  `json:"uid,omitempty"`
	Gid       uint32  `json:"gid,omitempty"`
	Target    string  `json:"target,omitempty"`     // symlinks
	Rdev      uint64  `json:"rdev,omitempty"`       // device nodes: the device number (Linux encoding)
	Layout    *Layout `json:"layout,omitempty"`     // files
	DirLayout string  `json:"dir_layout,omitempty"` // directories: default spec for new files
	// Dirty lists components that missed writes while their OSD was
	// unreachable, or were found lost; readers reconstruct them instead
	// of trusting them.
	Dirty []uint32 `json:"dirty,omitempty"`
	// Extents records, per parity group, how far the group's component
	// objects hold written data (object bytes; holes below it were
	// written as such). An object shorter than its group's extent, or
	// missing, has lost data: it is never read as zeros. Absent for files
	// written before extents were recorded (nothing is vouched by length).
	Extents []int64 `json:"extents,omitempty"`
	// SizeGen counts the file's truncations. A writer's view of the size
	// is of one generation: a commit from an older one (a writer that had
	// not seen a truncation by another) does not raise the size.
	SizeGen uint64 `json:"size_gen,omitempty"`
	// Sealed files are encrypted by their clients (internal/seal): Size
	// is the plaintext's, DataSize what the layout holds (ciphertext),
	// which every computation of objects and extents uses (Stored).
	Sealed   bool  `json:"sealed,omitempty"`
	DataSize int64 `json:"data_size,omitempty"`
}

// Stored is how many bytes of the layout's address space the file's data
// takes: its size, or for a sealed file its ciphertext's.
func (in *Inode) Stored() int64 {
	if in.Sealed {
		return in.DataSize
	}
	return in.Size
}

// SetStored records the stored size n, and the size that follows (a
// sealed file's, from its layout's stripe unit).
func (in *Inode) SetStored(n, unitBytes int64) {
	if in.Sealed {
		in.DataSize, in.Size = n, seal.PlainSize(n, unitBytes)
		return
	}
	in.Size = n
}

// OSD states in the cluster map.
const (
	StateUp   = cluster.StateUp   // heartbeating
	StateDown = cluster.StateDown // silent past the down timeout: clients read around it
	StateOut  = cluster.StateOut  // silent past the out grace period: its data is rebuilt elsewhere
)

// Endpoint is where an OSD listens and whether the MDS believes it is up.
type Endpoint struct {
	Addr string `json:"addr"`
	Up   bool   `json:"up"`
}

type HeartbeatReq struct {
	UUID          string `json:"uuid"`
	ID            uint32 `json:"id"`
	Addr          string `json:"addr"`
	CapacityBytes int64  `json:"capacity_bytes"`
	UsedBytes     int64  `json:"used_bytes"`
	FreeBytes     int64  `json:"free_bytes"`
	Pid           int    `json:"pid"`
	TimeNs        int64  `json:"time_ns"`
	Sig           []byte `json:"sig"` // cluster-key signature of the other fields
	// KeysHeld has bit i set for each capability key id the OSD holds,
	// so the MDS signs with a new key only once every OSD has it.
	KeysHeld uint64 `json:"keys_held,omitempty"`
	// Disk names the file system the OSD's directory is on (its machine
	// and device), with that file system's size and free space: OSDs on
	// one disk share it (SumCapacity). "" from an older OSD.
	Disk          string `json:"disk,omitempty"`
	DiskBytes     int64  `json:"disk_bytes,omitempty"`
	DiskFreeBytes int64  `json:"disk_free_bytes,omitempty"`
	// Host and Rack are the OSD's failure domains (braid osd --host,
	// --rack): placement keeps a parity group's components apart in them
	// (internal/core/placement). "": not said.
	Host string `json:"host,omitempty"`
	Rack string `json:"rack,omitempty"`
}

// MaxDomainBytes bounds a host or rack name.
const MaxDomainBytes = 64

// SignedBytes is what Sig covers (the disk and domain fields only when
// set, so an older OSD's heartbeat verifies as it did).
func (h *HeartbeatReq) SignedBytes() []byte {
	b := fmt.Appendf(nil, "%s|%d|%s|%d|%d|%d|%d|%d", h.UUID, h.ID, h.Addr, h.CapacityBytes, h.UsedBytes, h.FreeBytes, h.Pid, h.TimeNs)
	if h.Disk != "" {
		b = fmt.Appendf(b, "|%s|%d|%d", h.Disk, h.DiskBytes, h.DiskFreeBytes)
	}
	if h.Host != "" || h.Rack != "" {
		b = fmt.Appendf(b, "|host=%q|rack=%q", h.Host, h.Rack)
	}
	return b
}

type HeartbeatResp struct {
	ID uint32 `json:"id"`
	// Keys are the capability keys the OSD is to accept, by id, and
	// KeyCurrent the one the MDS signs with (capability.Ring): the OSD
	// holds exactly these from then on. None: an MDS that does not
	// rotate keys; the OSD keeps its own.
	Keys       []CapKey `json:"keys,omitempty"`
	KeyCurrent uint8    `json:"key_current,omitempty"`
}

// CapKey is one capability key of a ring.
type CapKey struct {
	ID  uint8  `json:"id"`
	Key []byte `json:"key"`
}

// Once names a namespace mutation for exactly-once execution (MDS
// once.go): the client session, the mutation's sequence number in it
// (sent again unchanged on every retry), and the session's floor, below
// which every mutation has been answered. Zero: unnamed, runs each time.
type Once struct {
	Session uint64 `json:"once_session,omitempty"`
	Seq     uint64 `json:"once_seq,omitempty"`
	Floor   uint64 `json:"once_floor,omitempty"`
}

// SetOnce names the request it is embedded in.
func (o *Once) SetOnce(v Once) { *o = v }

// PathReq names a file or directory: Path from the root, or, with Dir
// set, Path relative to directory Dir (by ino; a FUSE mount names entries
// this way).
type PathReq struct {
	Once
	Path string `json:"path"`
	Dir  uint64 `json:"dir,omitempty"`
	// Want, for Remove: "file" refuses directories (unlink, EISDIR), "dir"
	// refuses anything else (rmdir, ENOTDIR), "" takes either.
	Want string `json:"want,omitempty"`
	// Session, for Remove: as MkdirReq.Session (an rmdir in a directory
	// its client holds a write-back claim on, which it keeps).
	Session uint64 `json:"session,omitempty"`
}

type MkdirReq struct {
	Once
	Path    string `json:"path"`
	Dir     uint64 `json:"dir,omitempty"`
	Uid     uint32 `json:"uid,omitempty"`
	Gid     uint32 `json:"gid,omitempty"`
	Mode    uint32 `json:"mode"` // as given: 0 is 0 (clients choose defaults)
	Parents bool   `json:"parents"`
	// Session, if set, is the caching session of a client holding a
	// write-back claim on Dir that makes the directory under the claim
	// (it sent what it queued first, and keeps the name): the MDS lets
	// the mkdir past that claim instead of recalling it.
	Session uint64 `json:"session,omitempty"`
}

type CreateReq struct {
	Once
	Path      string `json:"path"`
	Dir       uint64 `json:"dir,omitempty"`
	Uid       uint32 `json:"uid,omitempty"`
	Gid       uint32 `json:"gid,omitempty"`
	Mode      uint32 `json:"mode"`             // as given: 0 is 0 (clients choose defaults)
	Layout    string `json:"layout,omitempty"` // empty: inherit
	SizeHint  int64  `json:"size_hint"`        // -1 unknown; below 64 KiB the file is mirrored
	Exclusive bool   `json:"exclusive"`
	Handle    uint64 `json:"handle,omitempty"` // take a lease for this handle
	// Session, with Handle, asks for the extent lock on the whole file
	// (granted in OpenResp.Lock); recalls go to this client session.
	Session uint64 `json:"session,omitempty"`
	// Unlinked creates the file without a name (like O_TMPFILE), held
	// only by the handle's lease, which it needs: Path only says where
	// the layout is inherited from. A commit with Publish names it; if
	// the handle goes first, the file and its objects are deleted.
	Unlinked bool `json:"unlinked,omitempty"`
}

// Publish names an unlinked file at its commit, replacing what the name
// held (unless Exclusive) in the same transaction: a file written this
// way appears whole or not at all.
type Publish struct {
	Path      string `json:"path"`
	Dir       uint64 `json:"dir,omitempty"`
	Exclusive bool   `json:"exclusive,omitempty"`
}

type OpenReq struct {
	Path   string `json:"path"`
	Ino    uint64 `json:"ino,omitempty"` // refetch by ino when set
	Write  bool   `json:"write"`
	Handle uint64 `json:"handle,omitempty"` // take (or renew) a lease for this handle
	// Session, with Write and Handle, asks for the extent lock on the
	// whole file, granted (in OpenResp.Lock) if no other handle holds one.
	Session uint64 `json:"session,omitempty"`
}

// OpenResp hands the client everything it needs to do I/O without the MDS.
type OpenResp struct {
	Inode     Inode               `json:"inode"`
	Cap       []byte              `json:"cap"`
	Endpoints map[uint32]Endpoint `json:"endpoints"`
	LeaseNs   int64               `json:"lease_ns,omitempty"` // the handle's lease lasts this long
	// OwnDirty are the marks of Inode.Dirty that the asking handle alone
	// made (for its own failed unit writes): it may read those
	// components once it has caught them up; every other mark it reads
	// around, whatever it caught up.
	OwnDirty []uint32     `json:"own_dirty,omitempty"`
	Lock     *ExtentGrant `json:"lock,omitempty"` // the extent lock asked for, if granted
	// DataKey is a sealed file's data key, for principals that may open
	// it (never the cluster's servers).
	DataKey []byte `json:"data_key,omitempty"`
	// Sync is the file's write-sync policy (SyncXattr, its own or taken
	// from its directory at create); empty: the client's default.
	Sync string `json:"sync,omitempty"`
}

type CommitReq struct {
	Ino     uint64   `json:"ino"`
	Size    int64    `json:"size"`
	MtimeNs int64    `json:"mtime_ns"`
	Dirty   []uint32 `json:"dirty,omitempty"` // components to add to the inode's dirty set
	// LayoutVersion is the layout the client wrote under; a commit from a
	// layout since replaced is refused (its data went to retired objects).
	LayoutVersion uint64 `json:"layout_version"`
	// Extents are, per parity group, how far the client's writes reached
	// in the group's objects (0: no write); they raise the inode's
	// extents. With Cut, the client first cut every object to Extents
	// (a truncation), so they replace the inode's extents instead.
	Extents []int64 `json:"extents,omitempty"`
	Cut     bool    `json:"cut,omitempty"`
	// SizeGen is the generation of Size (Inode.SizeGen): a commit without
	// Cut raises the size to Size if it is of the file's generation and
	// leaves it otherwise; a commit with Cut sets it and starts a new one.
	SizeGen uint64 `json:"size_gen,omitempty"`
	// Publish names a file created Unlinked, in the commit's transaction.
	Publish *Publish `json:"publish,omitempty"`
	// CaughtUp are components Handle marked dirty for unit writes that
	// failed, and has since sent again and synced: their marks are
	// cleared unless someone else marked them too, or a repair runs.
	CaughtUp []uint32 `json:"caught_up,omitempty"`
	// Missed are those of Dirty that Handle marked for its own failed
	// unit writes and still keeps to send again: they stay its to clear.
	Missed []uint32 `json:"missed,omitempty"`
	Handle uint64   `json:"handle,omitempty"`
	// Release ends Handle's lease (and its extent locks) once the commit
	// is done, as a RenewReq with Release would: Close's last commit.
	Release bool `json:"release,omitempty"`
}

type ReaddirReq struct {
	Path  string `json:"path"`
	Dir   uint64 `json:"dir,omitempty"`
	After string `json:"after"` // resume after this name
	Limit int    `json:"limit"`
	// Xattr names an extended attribute whose value each entry carries
	// (the S3 gateway's object metadata: a listing with ETags is then one
	// request a page, not one an object).
	Xattr string `json:"xattr,omitempty"`
	// Session is the asking client's: a directory it holds by a
	// write-back claim (claim.go) is listed without recalling it.
	Session uint64 `json:"session,omitempty"`
}

type DirEntry struct {
	Name  string `json:"name"`
	Inode Inode  `json:"inode"`
	Xattr []byte `json:"xattr,omitempty"` // the value of ReaddirReq.Xattr; nil if the inode has none
}

type ReaddirResp struct {
	Entries []DirEntry `json:"entries"`
	More    bool       `json:"more"`
	// XattrFilled says the entries carry ReaddirReq.Xattr (an MDS
	// older than that field leaves it false).
	XattrFilled bool `json:"xattr_filled,omitempty"`
}

type RenameReq struct {
	Once
	From    string `json:"from"`
	To      string `json:"to"`
	FromDir uint64 `json:"from_dir,omitempty"` // From is relative to this directory
	ToDir   uint64 `json:"to_dir,omitempty"`   // To is relative to this directory
	// NoReplace fails with ErrExists if To exists (RENAME_NOREPLACE).
	NoReplace bool `json:"no_replace,omitempty"`
}

type SetLayoutReq struct {
	Path string `json:"path"`
	Dir  uint64 `json:"dir,omitempty"`
	Spec string `json:"spec"`
}

type GetLayoutResp struct {
	Spec     string  `json:"spec"`     // effective spec for new files (dirs) or the file's spec
	Explicit bool    `json:"explicit"` // set on this directory rather than inherited
	Layout   *Layout `json:"layout,omitempty"`
}

// MarkDirtyReq reports components that missed a write, at once, so no
// repair uses them as a source and readers reconstruct them.
type MarkDirtyReq struct {
	Ino   uint64   `json:"ino"`
	Comps []uint32 `json:"comps"`
	// Writer is the handle of the writer making the mark: a client may
	// mark only a file it holds open for writing (Handle, below, says
	// whether the mark is that handle's own to clear).
	Writer uint64 `json:"writer,omitempty"`
	// Version, when set, applies the marks only while the file is still
	// at this layout version: a reader that found a component lost under
	// a layout since replaced says nothing about the new one.
	Version uint64 `json:"version,omitempty"`
	Why     string `json:"why,omitempty"` // logged by the MDS: what the component missed or how it was lost
	// Lost marks come from a reader that found an object shorter than the
	// extent it knew: ObjectLen is what the OSD held (-1: unusable as a
	// whole). The MDS marks only components still short of the extent it
	// records now (a truncation since the reader opened cut them rightly).
	Lost      bool  `json:"lost,omitempty"`
	ObjectLen int64 `json:"object_len,omitempty"`
	// Handle, when set, says the marks are a writer handle's unit writes
	// that failed, kept to be sent again at its sync: a component no one
	// else marked records the handle, whose commit may then clear the
	// mark (CommitReq.CaughtUp).
	Handle uint64 `json:"handle,omitempty"`
}

// Repair task kinds.
const (
	RepairRebuild = repair.KindRebuild // write Comps from the other components (or copy from MoveFrom)
	RepairScrub   = repair.KindScrub   // verify every stripe; rewrite what disagrees
)

type RepairAssignReq struct {
	Worker string `json:"worker"`
	// Process is the MDS process the worker runs in, as the routing table
	// names it ("" : a worker of its own): the leader ends its assignments when
	// that process leaves the cluster, not after the repair lease.
	Process string `json:"process,omitempty"`
}

// RepairTask is one file's repair, handed to a worker. The MDS has already
// installed Inode.Layout (version bumped) and listed Comps as dirty; the
// worker fences the old version on every OSD, writes Comps from Sources,
// and reports RepairDone. Until then writers of the file are told to wait.
type RepairTask struct {
	Kind      string              `json:"kind"` // "" when there is no work
	Inode     Inode               `json:"inode"`
	Cap       []byte              `json:"cap"`
	Endpoints map[uint32]Endpoint `json:"endpoints"`
	Comps     []uint32            `json:"comps"`   // components to write
	Sources   []uint32            `json:"sources"` // components trusted as sources
	// MoveFrom maps a component to the OSD that held it before this
	// version, when that OSD is up: its bytes are copied, not decoded.
	MoveFrom map[uint32]uint32 `json:"move_from,omitempty"`
	// RateBytesPerS bounds the worker's write rate for this task.
	RateBytesPerS int64 `json:"rate_bytes_per_s"`
}

type RepairDoneReq struct {
	Ino      uint64   `json:"ino"`
	Version  uint64   `json:"version"`
	Kind     string   `json:"kind"`
	Comps    []uint32 `json:"comps"`
	Sources  []uint32 `json:"sources"`
	Bytes    int64    `json:"bytes"`    // bytes written
	Read     int64    `json:"read"`     // scrub: unit bytes read
	Repaired int64    `json:"repaired"` // scrub: units found wrong and rewritten
	Err      string   `json:"err,omitempty"`
	// Lost is set when the file cannot be read whatever OSDs return:
	// some stripe has more units lost or corrupt than its parity
	// rebuilds. It says which and why.
	Lost string `json:"lost,omitempty"`
	// Found lists what a scrub found wrong (at most MaxRepairFound).
	Found []string `json:"found,omitempty"`
}

// RepairInterrupted is RepairDoneReq.Err from a worker that stopped
// during the job (its process is shutting down): not a failure.
const RepairInterrupted = "interrupted: the healer is stopping" // wire text: older MDSs and workers compare it

// MaxRepairFound bounds RepairDoneReq.Found; MaxLostListed the files
// StatusResp.LostFiles lists.
const (
	MaxRepairFound = 8
	MaxLostListed  = 100
)

// IntentReq opens (Begin), commits or closes (Done) a staged write of
// the components Comps of one stripe, under layout Version.
type IntentReq struct {
	Ino     uint64   `json:"ino"`
	Handle  uint64   `json:"handle,omitempty"` // the writer's (its lease is its write access)
	Txid    uint64   `json:"txid"`
	Version uint64   `json:"version,omitempty"`
	Comps   []uint32 `json:"comps,omitempty"`
}

// RenewReq keeps (or, with Release, drops) a writer's lease on a file.
type RenewReq struct {
	Ino     uint64 `json:"ino"`
	Handle  uint64 `json:"handle"`
	Release bool   `json:"release,omitempty"`
	Read    bool   `json:"read,omitempty"` // a reader's lease (a writer's lease running out gets the file scrubbed)
	// Uncommitted, with Release, by the writer of an Atomic create that
	// never got its name: per parity group, how far its writes reached
	// in the objects, so the space they hold is counted until deleted.
	Uncommitted []int64 `json:"uncommitted,omitempty"`
}

// RenewBatchReq renews many handles' leases (never releases: a release
// is its own RenewReq) in one request: a client renews every lease it
// holds at once, not one request per open file. At most MaxRenewBatch.
type RenewBatchReq struct {
	Leases []LeaseRef `json:"leases"`
}

// LeaseRef names one handle's lease.
type LeaseRef struct {
	Ino    uint64 `json:"ino"`
	Handle uint64 `json:"handle"`
	Read   bool   `json:"read,omitempty"`
}

// MaxRenewBatch bounds the leases one RenewBatchReq renews.
const MaxRenewBatch = 4096

type RenewResp struct {
	LeaseNs int64 `json:"lease_ns"` // renew well within this
}

type ScrubReq struct {
	Path string `json:"path"`          // "" or "/" for everything
	Ino  uint64 `json:"ino,omitempty"` // instead of Path: this one file
}

type ScrubResp struct {
	Files int64 `json:"files"` // files queued for scrubbing
}

type DrainReq struct {
	ID   uint32 `json:"id"`
	Undo bool   `json:"undo"`
}

// UpOSDs counts the OSDs in state "up".
func (s StatusResp) UpOSDs() int {
	n := 0
	for _, o := range s.OSDs {
		if o.State == StateUp {
			n++
		}
	}
	return n
}

// SetattrReq changes an inode's attributes; nil fields are left alone.
// Sizes change through the client (the OSDs' objects are cut too).
type SetattrReq struct {
	Ino     uint64  `json:"ino"`
	Mode    *uint32 `json:"mode,omitempty"`
	Uid     *uint32 `json:"uid,omitempty"`
	Gid     *uint32 `json:"gid,omitempty"`
	AtimeNs *int64  `json:"atime_ns,omitempty"`
	MtimeNs *int64  `json:"mtime_ns,omitempty"`
	// KillSuidgid clears set-user-ID and set-group-ID as a write by a
	// user without CAP_FSETID does on Linux: set-group-ID without group
	// execute stays if the file's group is one of WriterGroups (the
	// writer's group and supplementary groups). Applied to the mode the
	// MDS holds, so it cannot undo a chmod made since the client looked.
	KillSuidgid  bool     `json:"kill_suidgid,omitempty"`
	WriterGroups []uint32 `json:"writer_groups,omitempty"`
	// Session, if set, is the caching session of a client holding a
	// write-back claim on directory Ino that changes it under the claim
	// (it sent what it queued first): the MDS lets the change past the
	// claim instead of recalling it.
	Session uint64 `json:"session,omitempty"`
}

// LinkReq adds the name Name in directory Dir for file Ino (a hard link).
type LinkReq struct {
	Once
	Ino  uint64 `json:"ino"`
	Dir  uint64 `json:"dir"`
	Name string `json:"name"`
}

// SymlinkReq makes a symbolic link Name in Dir pointing at Target.
type SymlinkReq struct {
	Once
	Dir    uint64 `json:"dir"`
	Name   string `json:"name"`
	Target string `json:"target"`
	Uid    uint32 `json:"uid,omitempty"`
	Gid    uint32 `json:"gid,omitempty"`
}

// StatResp answers OpStat (a PathReq): an inode's attributes and, for a
// file, where its components live, with no capability: describing a file
// grants nothing.
type StatResp struct {
	Inode     Inode               `json:"inode"`
	Endpoints map[uint32]Endpoint `json:"endpoints,omitempty"`
}

// MknodReq makes a FIFO, socket or device node Name in Dir.
type MknodReq struct {
	Once
	Dir  uint64 `json:"dir"`
	Name string `json:"name"`
	Type string `json:"type"` // TypeFIFO, TypeSocket, TypeCharDev or TypeBlockDev
	Mode uint32 `json:"mode"`
	Rdev uint64 `json:"rdev,omitempty"`
	Uid  uint32 `json:"uid,omitempty"`
	Gid  uint32 `json:"gid,omitempty"`
}

// Xattr ops.
const (
	XattrGet    = "get"
	XattrSet    = "set"
	XattrList   = "list"
	XattrRemove = "remove"
	// XattrCreate and XattrReplace are Set flags (XATTR_CREATE, XATTR_REPLACE).
	XattrCreate  = 1
	XattrReplace = 2
	// LayoutXattr reads and sets a file's or directory's layout.
	LayoutXattr = "braid.layout"
	// SyncXattr is a file's or directory's write-sync policy (SyncCluster
	// or SyncAsync), set by its owner; a new file takes its directory's
	// (the nearest ancestor's that has one), as it takes a layout.
	SyncXattr = "braid.sync"
)

// Write-sync policies (SyncXattr; Sigma Cluster's synchronisation
// policies). Cluster: close and fsync return once every OSD of the
// layout has the data durable. Async: close returns once the OSDs have
// the data, which the client makes durable within a bounded interval
// (OSD SyncAll) or at fsync; fsync is as under cluster.
const (
	SyncCluster = "cluster"
	SyncAsync   = "async"
)

// ValidSyncPolicy reports whether p names a write-sync policy.
func ValidSyncPolicy(p string) bool { return p == SyncCluster || p == SyncAsync }

type XattrReq struct {
	Once
	Ino   uint64 `json:"ino"`
	Op    string `json:"op"`
	Name  string `json:"name,omitempty"`
	Value []byte `json:"value,omitempty"`
	Flags int    `json:"flags,omitempty"`
}

type XattrResp struct {
	Value []byte   `json:"value,omitempty"`
	Names []string `json:"names,omitempty"`
}

type StatfsResp struct {
	CapacityBytes int64 `json:"capacity_bytes"`
	FreeBytes     int64 `json:"free_bytes"`
	Inodes        int64 `json:"inodes"` // next inode number: an upper bound on files and directories
}

// KeyRotateResp says which capability key is now current and when the
// ones before it are no longer accepted.
type KeyRotateResp struct {
	ID       uint8 `json:"id"`
	RetireNs int64 `json:"retire_ns"`
}
