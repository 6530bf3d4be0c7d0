// Package coresim drives the MDS's cores together, single-threaded,
// with seeded events (raft's InteractionEnv, TigerBeetle's simulator):
// clients holding extent locks and caching metadata, MDS processes
// joining, leaving and restarting, OSDs failing and returning, repair workers
// assigning repairs, and the GC deleting what they leave. One weighted op
// generator, drawn from one random stream, picks every event, and a
// virtual clock is the only time, so a seed replays exactly: Run
// returns a digest of every decision, and the same seed gives the same
// digest. It runs thousands of steps a second.
//
// Beside each core's own invariants (checked after every decision in
// race and invariants builds), the simulation checks what only a model
// of the clients can see:
//
//   - Extent locks exclude across leases: a grant never overlaps a range
//     another handle still trusts it holds (its client trusts a lock
//     until a lease after it last asked), across restarts and slot
//     moves (the graces must cover them).
//   - Caches stay coherent: when a change commits, no client that still
//     trusts its cache holds the inode as it was before.
//   - A write-back claim keeps its directory out of every other cache.
//   - A file is never handed to two repair workers at once, a repair's new
//     layout uses only OSDs placement may use, and every routing table
//     serves each slot from a process alive.
//   - No object is deleted before its record's delay has passed.
//
// The whole-cluster simulation (the root package's sim_test.go) still
// runs the real code paths, goroutines and all; this one explores the
// protocols' interleavings fast and exactly.
package coresim
