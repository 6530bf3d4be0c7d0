// Package cache decides metadata cache coherence and write-back
// directory claims.
//
// Metadata caches kept coherent by callbacks (Panasas' callbacks, Ceph's
// capabilities, Sigma's leases). A client session that caches names and
// attributes is registered on each inode it was granted (a directory's
// registration covers its entries). Before a change to a registered
// inode's attributes or entries commits, each registered session is sent
// a recall of that inode, its registration ends, and the change waits
// until the session has acknowledged it, the session that asked for the
// change included (its own cache holds the old state too, and its
// lookups may be on their way). A session caches the inode again only by
// asking again, so a stream of changes to one directory costs a session
// that is not looking at it one recall, not one per change. A session
// that does not acknowledge within RecallWait is evicted (its
// registrations end, its next CacheWait starts a new epoch, and the
// client drops everything); the change then waits until the evicted
// session's lease has run out, counted from the newest CacheWait it
// sent, since the client counts its own lease from before it sent that
// request and so stops trusting its cache no later.
//
// A grant is refused while a change to one of its inodes is in flight,
// and when one began after the read it answers: the reader's state may
// predate the change. Registrations live in memory. A restarted MDS that
// finds the store's mark (the MDS keeps it) grants nothing and commits no
// change for one lease, by which time every client of the previous
// process has stopped trusting its cache.
//
// Write-back claims (mdsproto/claim.go for the protocol). A claim gives
// one caching session a directory to itself: the holder answers creates
// and unlinks in it from memory and flushes them in batches, so the MDS
// must keep everyone else from seeing the directory as the store has it
// while the holder may have answered more. So every read or change of the
// directory's record, times or entries by anyone but the holder (the
// gate: claim_ops.go) first recalls the claim and waits until the holder
// has flushed and released it (DirFlush with Release), or until the
// recall's deadline, after which the claim is taken away: its stored
// record goes first, so a late flush of the holder's finds no claim and
// is refused, never applied over what others did since.
//
// Claims are only of directories their holder made and claimed while
// empty, and end at the first recall, so no one else ever learnt an
// inode number in a claimed directory: reads by inode number need no
// gate. The claim is stored ('w' key, claimRec) from before it is
// granted until its release; a restarted process loads the stored
// claims already recalled, so what a holder acknowledged to the previous
// process reaches the store before anyone reads the directory.
//
// Table decides and does no I/O: no lock, no channel, no clock. What a
// decision wakes (a session's waiting CacheWait, the changes waiting for
// a session's acknowledgement, the readers waiting for a claim to end)
// collects in Effects, which the MDS (internal/mds/cache.go) takes after
// every call. Its coherent engine (cache_ops.go) runs each transaction,
// tells the table what it touched (Cover), and commits only when the
// table says no acknowledgement is pending. The transcripts in testdata
// name the interleavings past fixes were about; check() runs after every
// decision in race and invariants builds.
package cache
