package mdsproto

import "github.com/braidfs/braid/internal/core/cache"

// Metadata caches kept coherent by callbacks (the MDS's cache.go). A
// client that caches names and attributes keeps a CacheWait at the MDS:
// it renews the session's cache lease and carries back invalidations.
// A CacheLookup answered with Grant set (the session's epoch) registers
// the session on the inodes it names; before a change to one of them
// commits, the MDS recalls it from every registered session and waits
// until each has acknowledged.

// CacheWaitReq is a session's standing request for invalidations. Acked
// is the newest invalidation the client has applied; Epoch the epoch it
// caches under (0 before it has one, or to start over: the MDS then ends
// the session's registrations).
type CacheWaitReq struct {
	Session uint64 `json:"session"`
	Epoch   uint64 `json:"epoch,omitempty"`
	Acked   uint64 `json:"acked,omitempty"`
	WaitNs  int64  `json:"wait_ns"`
}

// CacheWaitResp answers a CacheWait. An Epoch other than the request's
// means the session's registrations are gone (new session, eviction, or
// another MDS process): the client drops everything it caches. Its cache
// lasts LeaseNs from when it sent the request.
type CacheWaitResp struct {
	Epoch         uint64         `json:"epoch"`
	LeaseNs       int64          `json:"lease_ns"`
	Invalidations []Invalidation `json:"invalidations,omitempty"`
}

// Invalidation recalls inode Ino from a caching session: its attributes
// and, for a directory, its entries changed (or are about to, once the
// session has acknowledged). The session is no longer registered on it.
// Self marks a recall by a change the session asked for itself: the
// change's answer will carry the inode as committed (CacheSelf), and may
// let the session keep the directory entries it recalls (Kept).
type Invalidation = cache.Invalidation

// CacheSelf rides on the answer of a named change (as the field
// "cache_self", added to whatever the answer is) to the caching session
// that asked for it: the change recalled what it touched from the session
// too, and here grants it again as committed, so the session need not
// ask. Inodes are the attributes of the inodes the session is now
// registered on; Entries the entries of those directories the change
// wrote (Ino 0: removed). Kept names directories whose other entries no
// change but this one has touched since the recall Seq of the session
// (marked Self): the session may keep what it cached of them. Seq is as
// in CacheLookupResp.
type CacheSelf struct {
	Epoch   uint64      `json:"epoch"`
	Seq     uint64      `json:"seq"`
	Inodes  []Inode     `json:"inodes,omitempty"`
	Entries []SelfEntry `json:"entries,omitempty"`
	Kept    []SelfKept  `json:"kept,omitempty"`
}

// SelfKept is a directory whose entries a session cached before the
// recall Seq are still as they were, but for the change's own Entries.
type SelfKept struct {
	Ino uint64 `json:"ino"`
	Seq uint64 `json:"seq"`
}

// SelfEntry is one directory entry a change wrote.
type SelfEntry struct {
	Dir  uint64 `json:"dir"`
	Name string `json:"name"`
	Ino  uint64 `json:"ino,omitempty"`
}

// CacheLookupReq looks up Name in directory Dir, or with Name empty
// fetches inode Dir's attributes, for a session that caches.
type CacheLookupReq struct {
	Dir     uint64 `json:"dir"`
	Name    string `json:"name,omitempty"`
	Session uint64 `json:"session,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
}

// CacheLookupResp is the inode found (nil: no such entry) and, if the
// answer may be cached, the epoch it was granted in (Grant) and the
// newest invalidation queued to the session before it (Seq): a client
// that has applied a newer one must not cache the answer.
type CacheLookupResp struct {
	Inode *Inode `json:"inode,omitempty"`
	Grant uint64 `json:"grant,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
}
