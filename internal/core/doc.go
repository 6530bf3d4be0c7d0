// Package core holds, one package per protocol, the decisions the MDS
// makes: given state, an event, the time and a random source, each core
// returns its new state and a decision record; the MDS (the shell)
// reads its store, calls the core, writes what it decided and sends
// what it says to send. Cores do no I/O: no store, no network, no
// goroutines, no clock (TestCoresArePure enforces it), so each is
// driven by datadriven transcripts in its testdata, and each checks its
// invariants after every decision in race and `invariants` builds
// (internal/invariants).
//
// The pattern is etcd's raft (a pure Step; the driver persists and
// sends), Pebble's package per concern, and TigerBeetle's assertions.
package core
