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
// Table decides and does no I/O: no lock, no channel, no clock. Each
// call says what it decided; what must be woken as a result (waiters of
// a file whose locks went, a session's waiting LockWait) collects in
// Effects, which the caller (internal/mds/extlock_ops.go) takes after
// every call and acts on. The transcripts in testdata name every
// interleaving a past fix was about; check() runs after every decision
// in race and invariants builds.
package extlock
