package mdsproto

// Write-back of a directory's names (Ceph's asynchronous directory
// operations). A client that caches metadata (CacheWait) may claim a
// directory it has just made, while it is empty: the MDS then lets no
// other client read or change the directory, its entries or its
// attributes until the claim ends. The holder answers creates of
// empty regular files and unlinks of files in it from memory, with
// inode numbers from the range the claim carries, and sends them in
// batches (DirFlush), one transaction each. Anyone else who reads or
// changes the directory makes the MDS recall the claim (an Invalidation
// with Claim set) and wait until the holder has flushed and released it;
// a holder that does not within its lease loses the claim and what it
// had not flushed. A claim is stored (it outlives an MDS restart, so a
// holder flushes to the next process what it acknowledged to the
// previous one).

// DirClaimReq claims directory Dir for session Session (cache epoch
// Epoch) or, with Extend, gives the session's claim on it a new range of
// inode numbers (every create from the old range must be flushed first:
// the old range is no longer accepted).
type DirClaimReq struct {
	Session uint64 `json:"session"`
	Epoch   uint64 `json:"epoch"`
	Dir     uint64 `json:"dir"`
	// Claim is the id the client gives the claim (not 0): a claim
	// asked again with it is answered as granted, and one the client
	// never heard was granted it releases by it (DirFlush).
	Claim  uint64 `json:"claim"`
	Extend bool   `json:"extend,omitempty"` // extend claim Claim
}

// DirClaimResp is the claim granted: its id and the inode numbers the
// holder may give its creates, InoBase + i*InoStep for i < InoCount. Dir
// is the directory's inode as the claim found it.
type DirClaimResp struct {
	Claim    uint64 `json:"claim"`
	InoBase  uint64 `json:"ino_base"`
	InoStep  uint64 `json:"ino_step"`
	InoCount uint64 `json:"ino_count"`
	Dir      Inode  `json:"dir"`
	// MaxOps is how many ops one DirFlush may carry (the engine's limit
	// on one transaction's writes).
	MaxOps int `json:"max_ops"`
}

// DirFlushReq applies Ops to directory Dir, in order, in one transaction
// (at most DirClaimResp.MaxOps of them),
// under claim Claim of session Session; Release ends the claim in the
// same transaction. If one op cannot be applied, nothing is, and the
// answer's error says which (the holder then sends them one by one).
type DirFlushReq struct {
	Once
	Session uint64  `json:"session"`
	Dir     uint64  `json:"dir"`
	Claim   uint64  `json:"claim"`
	Ops     []DirOp `json:"ops,omitempty"`
	Release bool    `json:"release,omitempty"`
	// Open, once the ops are applied, opens a file the claim made (most
	// often by the last of them) for the flush's caller, as an OpenReq
	// would, in the same round trip: a small file's first write costs one
	// request, not a flush and then an open. A failed open fails nothing
	// else: DirFlushResp.Open is nil, and the client opens as before.
	Open *OpenReq `json:"open,omitempty"`
}

// DirFlushResp answers a DirFlush: the file Open asked for, if opened.
type DirFlushResp struct {
	Open *OpenResp `json:"open,omitempty"`
}

// DirOp is one create (of an empty regular file) or, with Remove, one
// unlink of a name that is not a directory.
type DirOp struct {
	Remove bool   `json:"remove,omitempty"`
	Name   string `json:"name"`
	Ino    uint64 `json:"ino,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Uid    uint32 `json:"uid,omitempty"`
	Gid    uint32 `json:"gid,omitempty"`
	TimeNs int64  `json:"time_ns,omitempty"` // when the holder answered it
	// SizeHint is the size a create's file is written to at once, when
	// the holder knew it before sending the create (a small file written
	// whole at its close): up to layout.SmallFileBytes the file is placed
	// mirrored (placement.SmallFileSpec). 0: not known.
	SizeHint int64 `json:"size_hint,omitempty"`
	// MtimeNs and AtimeNs, if set, are a create's times as its caller set
	// them before the create was sent (utimensat; root only).
	MtimeNs int64 `json:"mtime_ns,omitempty"`
	AtimeNs int64 `json:"atime_ns,omitempty"`
}

// MaxDirFlushOps bounds the ops of one DirFlush (an engine may take
// fewer: DirClaimResp.MaxOps).
const MaxDirFlushOps = 1024
