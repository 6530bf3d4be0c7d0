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
// The protocol on the wire. A client that caches (Client.CacheMetadata,
// the client library's mdcache.go; the mount by default) keeps a
// standing CacheWait at the MDS and looks names and attributes up with
// CacheLookup, whose answer may carry a grant: the session is then
// registered on the directory and the inode it names (at most 2^18 a
// session), and keeps the answer, positive or negative, with no fixed
// timeout. The MDS's engine (internal/mds/cache_ops.go) wraps every
// transaction and notes the inodes whose record (i) or entries (d) it
// writes; before it commits, each is recalled from every session
// registered on it, and the change waits for each acknowledgement (the
// transaction is rolled back and run again after them). So no change is
// visible anywhere while some cache still holds the old state, the
// client that made it included. What this costs: a change to something
// cached waits one round trip per holder (the holders in parallel).
//
// The client that asked for a change gets it back with the answer: once
// its recall is acknowledged, the MDS registers it again on what the
// transaction wrote and adds cache_self to the answer (whatever the
// answer is: the field is appended to its CBOR map) with those inodes
// as committed, the entries written, and the directories no other
// change touched since its recall, whose other cached entries it may
// keep (Kept: the client set them aside when the recall came, marked
// Self). The requester of a change stays registered through its own
// recall (its answer registers it again anyway), so a change by another
// client while its own runs is reported to it like to anyone. A
// directory a client made itself is known whole to it, so a name
// missing from it is answered from memory; a recall by anyone else ends
// that. A client takes an answer (a lookup's grant or a change's) only
// for inodes that no invalidation queued after it has recalled (it
// remembers the last 4,096). While a change is in flight, and for a
// reader that read before it began (a ring of the last 1,024 changes),
// nothing of its inodes is granted.
//
// Leases. RecallWait is a second; the lease is the lock lease (4 s).
// The client stops answering from memory when its lease runs out. The
// store's mark is s/cache_held, set before the first grant and cleared
// after a lease with no caching session.
//
// Beyond the papers: Panasas' MDS breaks callbacks from the operations
// that it knows change a file; braid's engine finds what a transaction
// changes from the keys it writes, so no path that changes an inode (a
// repair's layout bump, a commit, an orphan's reaping) can skip the
// recall. The CacheWait travels on a connection of its own (its own
// pool and peer id): the MDS reads at most 256 requests of a connection
// at once, and a client whose 256 changes all wait for its
// acknowledgement would otherwise never get it through (it was evicted,
// a second and a lease later; TestMetadataCacheManyChangesAtOnce). The
// extent locks' LockWait still shares the client's connection. How the
// mount lets the kernel keep names and attributes under these grants is
// docs/fusefs.md.
//
// Write-back claims (Ceph's asynchronous directory operations;
// mdsproto/claim.go for the protocol). A create or an unlink that waits
// for its own commit is bound by one MDS round trip and one fsync, about
// 1 ms through FUSE here, while go-fuse's loopback creates in 0.25 ms
// and removes in 0.07 ms: no synchronous protocol reaches half of that
// (issue 13's aim). So a client that caches claims each directory it
// makes, while it is empty (OpDirClaim; claim.go here decides,
// internal/mds/claim_ops.go does the I/O, the client library's
// writeback.go is the holder's side). A claim gives one caching session
// a directory to itself: the holder answers creates of empty regular
// files and unlinks of files in it from memory, with inode numbers from
// the claim's range (8,192 at a time, taken from the counter so no one
// else ever gives them), and flushes them in batches (OpDirFlush, at
// most 1,024 ops, one transaction, one fsync, exactly-once like any
// named change; the engine's limit on one transaction's writes lowers
// the 1,024: etcd's --max-txn-ops of 128 allows 37). A batch not
// answered is sent again under its first name, so a copy applied late
// is not refused for itself.
//
// The MDS must keep everyone else from seeing the directory as the
// store has it while the holder may have answered more. So every read
// or change of the directory's times or entries by anyone but the
// holder's claim-aware requests (the gate: the same key-level wrapping
// that finds what a transaction changes, here for what it reads) rolls
// back, recalls the claim and waits until the holder has flushed and
// released it (DirFlush with Release), or until the recall's deadline
// (a lease and a second), after which the claim is taken away: its
// stored record goes first, so a late flush of the holder's finds no
// claim and is refused (ErrRecalled), never applied over what others
// did since. The directory's own record is not gated, since a claim's
// ops never change it, so a path walk or a permission check passes. The
// recall rides the cache's CacheWait; the client's sender releases
// behind it, on a connection pool of its own (the holder's other
// requests may all be waiting at that gate). No other cache is granted
// the directory while it is claimed, nor any cache that read it before
// the claim. So another client (or mount, or the S3 gateway) sees every
// acknowledged create and unlink at once, as with the cache. The
// holder's other requests (an rmdir of the directory, a path through
// it) recall its own claim the same way. A claim whose holder is silent
// is taken away by the MDS's expiry loop even if no one reads it.
//
// Claims are only of directories their holder made and claimed while
// empty, and end at the first recall, so no one else ever learnt an
// inode number in a claimed directory: reads by inode number need no
// gate. The claim is stored ('w' key, claimRec) from before it is
// granted until its release; a restarted process loads the stored
// claims already recalled, so what a holder acknowledged to the previous
// process reaches the store before anyone reads the directory: the
// holder, seeing a new cache epoch, sends what it holds once the grace
// ends, and no one else reads the directory before that (or before a
// lease and a second after the grace: the holder's deadline). Claims are
// named by the client, so one whose grant's answer was lost is released
// by that name; a claim's inode numbers are given in order, once each.
// A batch's files are placed on OSDs up if the MDS can, else on any it
// knows, up or not (placeAcknowledged), so an OSD's death between the
// claim and the flush refuses no create; too few OSDs for the layout
// refuses ops one by one. What the holder promises its callers, and what
// it does when a batch fails, is the client's (docs/braid.md,
// "Write-back of names").
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
