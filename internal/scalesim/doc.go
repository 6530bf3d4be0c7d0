// Package scalesim runs braid's placement, repair-planning, balancing
// and routing cores (the functions the MDS calls, not copies) over a
// simulated cluster far larger than any test can start: by default
// 10,000 OSDs in hosts and racks holding 100 million files of a
// realistic size mix, under failure processes (disks and hosts failing
// at annual rates, whole racks lost together, slow disks). `braid sim`
// prints what it finds and writes it, with plots, to a directory
// (docs/sim in the repository).
//
// What it measures, per layout:
//
//   - the spread of capacity over the OSDs (placement weighted by free
//     space, groups kept apart in hosts and racks);
//   - the rebuild time after a disk and after a host failure: every
//     file with a component there is assigned as the MDS assigns it
//     (repair.DecideAssignment: the plan, the new OSDs), the bytes each OSD
//     reads and writes are summed, and the slowest OSD's share sets the
//     time (declustered rebuild runs on all of them at once);
//   - the traffic of adding 10% more OSDs: the balancer's moves
//     (repair.Target, repair.PickMove) until the cluster is even, and
//     the slots a new MDS process takes (route.Plan);
//   - the probability of losing data in a year: a Monte Carlo over
//     simulated years of failures, each failed OSD vulnerable until its
//     rebuild ends. A set of OSDs failed at once loses data when some
//     parity group has more components among them than its parity; the
//     chance of that is computed from how placement spreads a group over
//     hosts and racks (a group takes one OSD per host, or per rack, when
//     the cluster has enough of them), times the number of groups.
//     Checked against the closed-form MTTDL of the textbook model,
//     MTTF^(M+1) / (N(N-1)...(N-M) MTTR^M), in the cases that model
//     covers (every set of M+1 OSDs shares a group).
//
// Files are modelled by a sample placed for real (SampleFiles), each
// standing for Files/SampleFiles files of its size. The simulation is
// seeded and single-threaded: a seed gives the same report.
package scalesim
