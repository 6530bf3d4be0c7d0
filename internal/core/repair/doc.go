// Package repair decides what a file needs to regain full redundancy
// (Plan): which components move off OSDs that are out, unknown or
// draining, which are rewritten in place, which wait for an OSD that is
// down, which share an OSD with another of their parity group, and
// whether the file can be repaired now, or is lost. It is decided from
// the file's layout, its dirty components and the OSDs' views alone;
// the MDS (internal/mds/repair.go) reads those, calls Plan, writes the
// repair lock and new layout it decides, and the worker does the I/O.
//
// Self-healing. The MDS judges each OSD by its heartbeat silence
// (internal/core/cluster): up; down after OSDDownAfter, when clients
// read around it and mark what it misses dirty, reported to the MDS at
// once, before the write counts; out after OSDOutAfter. Plan decides
// per file: components on out (or draining, or crowded) OSDs move,
// dirty ones on up OSDs are rewritten in place (catch-up), ones on down
// OSDs wait.
//
// Assignments. A worker is assigned a file (DecideAssignment, recorded in Assignments): in
// one transaction the MDS picks new OSDs (placement.Replace: never one
// holding a component of the same group while another will do), bumps
// the layout version, adds the rewritten components to the dirty set
// (readers decode them meanwhile) and locks the file against writers
// (ErrBusy; clients wait). The worker (internal/repairworker)
// fences the old version by syncing every object at the new one (OSDs
// then refuse the old capability), reads each stripe's sources (copying
// a draining component, or decoding K of the others), writes the
// targets, truncates and fsyncs them, and reports; the MDS clears the
// dirty marks unless a source went dirty meanwhile. Writers whose
// layout moved under a stripe send it whole again. A worker that dies
// holding an assignment loses it with its repair lock (Lease, 10 minutes);
// the file is then assigned again. With several MDS processes each
// counts a lock's 10 minutes on its own clock from when it first saw
// the lock (internal/mds/sights.go). The MDS runs four repair workers; `braid
// heal` adds more anywhere.
//
// An assignment names the process its worker runs in (Assigned.Process, from
// RepairAssignReq.Process), and the leader ends it when that process
// leaves the active list after the assignment, judged on the leader's clock
// alone (the repair writes under a new layout version, which fences
// anything the old worker, if only cut off, still sends); a scrub so
// ended goes back in the queue (NoteActives). The repair lock names the
// claimant's process too, so a leader judges the assignments an earlier one
// handed out (a dead leader's own repair workers') by whether that process is
// among the actives it sees: a process joins before it starts repair workers,
// so one missing from a look taken in this lead has left since (a
// leader forgets its looks when it loses the lead, ForgetActives, and
// counts its assignments in flight, which have written their lock but not
// yet their record, InFlight, so none is taken for an inherited one;
// assignments are not serialised for it, as they share commits). Left: this
// holds with `--all-active` only; assignments of repair workers outside MDS
// processes, of a process back under its name before the leader saw it
// gone, and locks written by older versions (no process named) wait out
// the lease.
//
// Finding work. Assignments find work by reading every inode only after the
// cluster map changed (an OSD down, out, added, drained, removed) or a
// restart, until one full pass finds nothing; in between they read the
// repair index (h<ino>, written in the same transaction as the inode:
// files with dirty components or a repair lock), so a steady cluster's
// idle repair workers cost almost nothing however many files it holds. The
// per-OSD byte estimate behind rebalancing is a full read too, spaced by
// twenty times its own duration (internal/mds/balance.go).
//
// Rebalancing (Target, PickMove) hands idle repair workers a move of one
// healthy component from the fullest to the emptiest OSD (by
// layout-estimated bytes) while they differ by more than the slack.
//
// A scrub is assigned the same way (KindScrub), reads every unit (OSDs
// verify every block's CRC), rewrites corrupt units from the rest, and
// where all blocks are clean but parity disagrees recomputes parity from
// the data.
//
// Lost files are named, not counted (beyond the papers). A file is lost
// when some parity group has fewer than K components that are clean and
// on OSDs still in the cluster (FilePlan.Lost), or when a worker finds a
// stripe it cannot decode whatever OSDs return: more units lost or
// corrupt than parity rebuilds, as opposed to units merely unreachable
// (stripeLost in internal/repairworker's scrub.go, reported as
// RepairDoneReq.Lost). Both are kept in the store (l<ino>,
// internal/mds/damage.go) with why and since when, in the transaction
// that marks the components or ends the repair, so an MDS restart
// forgets nothing; a successful repair or scrub, or the file's removal,
// clears it. Status derives the rest from its scan (a writer's missed
// writes beyond parity, OSDs out), sets health `lost`, and names each
// file by path; the last 32 losses, scrub repairs (with what was found)
// and rebuilds are kept in memory for `files lately`. Before, such a
// file failed four repairs, left the queue, and status said `ok`. Lost
// is judged only without a repair running: a repair lists moved
// components dirty while their old copies still read.
package repair
