// Package repair decides what a file needs to regain full redundancy
// (Plan): which components move off OSDs that are out, unknown or
// draining, which are rewritten in place, which wait for an OSD that is
// down, which share an OSD with another of their parity group, and
// whether the file can be repaired now, or is lost. It is decided from
// the file's layout, its dirty components and the OSDs' views alone;
// the MDS (internal/mds/heal.go) reads those, calls Plan, writes the
// repair lock and new layout it decides, and the healer does the I/O.
package repair
