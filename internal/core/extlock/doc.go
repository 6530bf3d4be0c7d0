// Package extlock decides extent locks: concurrent writers of one file,
// coordinated per stripe range (Lustre's extent locks; Panasas and
// Sigma serialise parity updates per stripe). A writer holds the write
// lock on a stripe from before it reads the stripe for a
// read-modify-write until the stripe's units are durable on their OSDs;
// two writers of one stripe would otherwise each write back the other's
// bytes as they read them, and parity would match the wrong data.
//
// Locks are cached by the client (a sole writer takes the whole file at
// open and never asks again) and recalled when another handle wants an
// overlapping range: the table queues a recall for the holder's session,
// which its standing LockWait request carries back; the holder makes its
// writes in the range durable, hands over its view of the file's size,
// and releases exactly the range asked for. Writers of different stripes
// never wait for each other.
//
// Locks live in MDS memory and are leases: a session's LockWait renews
// them all, and a session silent for the lease loses them (its client
// stops trusting them at the same lease counted from when it sent the
// request, so the two agree without comparing clocks). After a restart
// the MDS grants nothing for one lease if locks may have been held (a
// mark in the store says so): old holders have stopped by then. A slot
// gained from another process (several active) holds grants back the
// same way, while that process's clients reclaim their locks here.
//
// The protocol in full (the client's side is the client library's
// lock.go; internal/mds/extlock.go and extlock_ops.go are the shell):
//
//   - A writer that opens a file no other handle holds a lock on gets
//     the whole file with the open (OpenResp.Lock): a sole writer never
//     asks again, so the common case costs no round trip. One asking for
//     a range others hold gets a recall queued to each holder for
//     exactly the overlap; the holder sends its stripe buffer if it is
//     there, syncs its OSDs, and gives the range back with its view of
//     the file's size, which the next holder adopts before it reads
//     anything. Locks are per stripe range and per open handle. Sigma
//     and Panasas serialise per stripe too; Lustre grants whole extents
//     and cancels whole locks.
//   - Recalls travel on a standing LockWait request per client (a long
//     poll on the pipelined MDS connection, which ends when the
//     connection is fenced: wire.ConnDone). Grants are numbered: a
//     recall that overtakes its grant's answer waits for it, and a
//     release names the newest grant the holder had seen, so a grant
//     still on its way is never given back unseen (found by
//     TestOverlappingWritersKeepParity).
//   - The lease is LockLease (4 s). A stripe buffered under a lock that
//     lapsed is not sent. A session the MDS dropped starts a new epoch
//     when heard from again; grants and answers carry it, and a client
//     that sees a newer epoch knows its locks may have gone to another
//     writer: it drops them and fails what it had not made durable under
//     them (found by review: a client cut off from the MDS, not the
//     OSDs, trusted its old locks once it could renew, and zeroed
//     another writer's bytes).
//   - The store's mark is s/locks_held; during the restart's grace
//     clients reclaim their locks with their sizes. Grants and answers
//     name the MDS process (Incarnation, counted up at every start), so
//     a client reclaims from a newer one and ignores a late answer from
//     an older one.
//   - Dirty marks travel with grants: a writer reads around every
//     component another writer marked (its unit write failed), even one
//     it has itself caught up since (OwnDirty names the marks the handle
//     alone made). Two simulation seeds found a stale unit read as
//     current for a read-modify-write without this.
//   - Size: a commit raises the size and never lowers it, unless it
//     truncates; a truncation starts a new size generation
//     (Inode.SizeGen), and a commit of an older generation (a writer
//     that had not seen another's truncation) leaves the size alone.
//   - One mount shares one braid.File per inode among all its
//     descriptors (internal/fusefs/writer.go): one size, one stripe
//     buffer, no recalls between processes of one machine.
//
// Without locks, two writers of one stripe each wrote back the other's
// bytes as they read them: interleaved 47 KB blocks from two writers
// lost a third of the blocks, and parity matched the wrong data. What
// is not covered: a client whose OSD writes are delayed in the network
// past its lease (the lease assumes a stripe write finishes within it;
// the OSDs do not fence a lapsed holder yet), and reads, which take no
// locks: a reader on another client sees each stripe as of some moment,
// with close-to-open consistency.
//
// Table decides and does no I/O: no lock, no channel, no clock. Each
// call says what it decided; what must be woken as a result (waiters of
// a file whose locks went, a session's waiting LockWait) collects in
// Effects, which the caller (internal/mds/extlock_ops.go) takes after
// every call and acts on. The transcripts in testdata name every
// interleaving a past fix was about; check() runs after every decision
// in race and invariants builds.
package extlock
