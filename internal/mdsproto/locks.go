package mdsproto

import "github.com/braidfs/braid/internal/core/extlock"

// Extent locks: the messages of OpExtentLock, OpExtentRelease,
// OpLockWait and OpReclaim (internal/mds/extlock.go decides).

// ExtentReq asks for (OpExtentLock) or gives back (OpExtentRelease) a
// write lock on stripes [Lo, Hi) of a file, for one open handle of one
// client session. Writers hold a stripe's lock from before they read it
// for a read-modify-write until its units are durable on the OSDs, so
// concurrent writers of one stripe never write back each other's bytes
// (internal/mds/extlock.go).
type ExtentReq struct {
	Ino     uint64 `json:"ino"`
	Handle  uint64 `json:"handle"`
	Session uint64 `json:"session"`
	Lo      int64  `json:"lo"`
	Hi      int64  `json:"hi"` // MaxStripe: to the end of any file
	// With a release: the writer's view of the file's size (of
	// generation SizeGen), handed to the next holder; and the newest
	// grant the holder had when it gave the range up (Seq): parts
	// granted after it, whose grant it had not seen, stay held.
	End     int64  `json:"end,omitempty"`
	SizeGen uint64 `json:"size_gen,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
}

// MaxStripe stands for "every stripe from Lo on" in an ExtentReq.
const MaxStripe = extlock.MaxStripe

// ExtentGrant is a granted extent lock, with the file's size as the MDS
// knows it (committed, or handed over by holders since) and its
// generation; LeaseNs says how long the session's locks last without a
// LockWait.
type ExtentGrant struct {
	// Incarnation names the MDS process that granted the lock (counted up
	// at every start): locks live in its memory, and a client that meets
	// a newer one reclaims its locks from it (ReclaimReq).
	Incarnation uint64 `json:"incarnation"`
	// Server, with several active MDS processes, is the granting one's
	// address as the routing table names it: the client keeps the lock
	// in its session with that process.
	Server string `json:"server,omitempty"`
	// SessionEpoch numbers the client session's life at that process: a
	// session silent past its lease loses its locks, and is heard from
	// again under a new epoch, which tells the client so.
	SessionEpoch uint64 `json:"session_epoch"`
	Seq          uint64 `json:"seq"` // grants are numbered in the order the MDS made them
	Lo           int64  `json:"lo"`
	Hi           int64  `json:"hi"`
	End          int64  `json:"end"`
	SizeGen      uint64 `json:"size_gen,omitempty"`
	LeaseNs      int64  `json:"lease_ns"`
	// Dirty is the file's dirty set as the grant found it, and OwnDirty
	// the marks the asking handle alone made: every other mark (another
	// writer's unit write failed) it reads around before it reads the
	// stripes for a read-modify-write.
	Dirty    []uint32 `json:"dirty,omitempty"`
	OwnDirty []uint32 `json:"own_dirty,omitempty"`
	// Extents are the inode's extents (how far each group's objects hold
	// written data) as the grant found them: a handle that learns from
	// SizeGen that another cut the file must not vouch for reads with
	// the extents it opened with.
	Extents []int64 `json:"extents,omitempty"`
}

// LockWaitReq is a client session's standing request for recalls: it
// renews every lock the session holds and is answered when one of them
// is wanted by another writer, or after WaitNs with nothing.
type LockWaitReq struct {
	Session uint64 `json:"session"`
	WaitNs  int64  `json:"wait_ns"`
}

type LockWaitResp struct {
	Recalls []Recall `json:"recalls,omitempty"`
	// Moved are files whose locks this process gave up because the
	// routing table moved their slots to another: the client reclaims
	// them at the new owner, in its grace (several active processes).
	Moved        []uint64 `json:"moved,omitempty"`
	LeaseNs      int64    `json:"lease_ns"` // the session's locks last this long from the request
	Incarnation  uint64   `json:"incarnation"`
	SessionEpoch uint64   `json:"session_epoch"`
}

// ReclaimReq asks a restarted MDS (another incarnation than the one
// that granted them) to take back the locks a handle holds, with its
// view of the size. It is accepted only while the new process grants
// nothing else (its grace, one lease from its start), when no lock can
// have been granted over them since.
type ReclaimReq struct {
	Ino     uint64     `json:"ino"`
	Handle  uint64     `json:"handle"`
	Session uint64     `json:"session"`
	Spans   [][2]int64 `json:"spans"` // stripe ranges [lo, hi)
	End     int64      `json:"end"`
	SizeGen uint64     `json:"size_gen,omitempty"`
}

// Recall asks the holder of a lock to give back stripes [Lo, Hi) of it
// once its writes there are durable. Seq is the grant the lock came
// from: a recall can reach the client before that grant's answer does,
// and is then held back until it has.
type Recall = extlock.Recall
