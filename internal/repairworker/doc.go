// Package repairworker is braid's repair worker: it asks the MDS for
// work (OpRepairAssign), is assigned one file at a time with the file's
// new layout and a repair lock, and does the I/O the MDS decided
// (internal/core/repair): it fences the old layout version on every
// OSD, then rebuilds lost components from the others, catches up
// components that missed writes, copies components off draining or
// crowded OSDs, or scrubs (reads every unit, rewrites the minority of a
// disagreeing stripe, reports stripes lost beyond parity by name), and
// reports back (OpRepairDone). The MDS runs such workers itself (As);
// `braid heal` and the public Client.Heal run more anywhere, each bound
// to the rates the MDS hands out.
//
// Files: worker.go the loop of asking, working and reporting; job.go one
// assigned file's fence, rebuild and finish; scrub.go scrub and the
// telling of lost stripes from unreachable ones; run.go the workers an
// MDS process runs, reconnecting while its MDS is away.
package repairworker
