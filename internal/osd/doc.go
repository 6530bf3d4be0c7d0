// Package osd is braid's object storage daemon: it stores component objects
// addressed by <ino, component, offset, length>, checks the capability on
// every request, verifies a CRC32C per block on every read, and heartbeats
// to the MDS.
//
// On-disk format, version 2 (version 1 objects are still read). An OSD
// owns one directory:
//
//	DIR/braid-osd.json          superblock: {"format":2,"uuid":...,"osd_id":N}
//	                            (format 1: no pack; raised to 2 at start, so
//	                            a binary from before the pack refuses it)
//	DIR/pack/SEQ-SALT.log       the pack: objects of up to 64 KiB, as
//	                            checksummed records in a log (pack.go,
//	                            format in packfmt.go)
//	DIR/objects/XX/INO.COMP.dat object data; XX = low byte of ino in hex,
//	                            INO = 16 hex digits, COMP = decimal component
//	DIR/objects/XX/INO.COMP.sum checksums of the data file
//	DIR/objects/XX/INO.COMP.TXID.stg  a staged write (stage.go)
//	DIR/objects/XX/INO.COMP.TXID.app  tombstone: that staged write was
//	DIR/objects/XX/INO.COMP.TXID.abt  applied / aborted (empty; stage.go)
//
// The .sum file starts with a 64-byte header (little-endian):
//
//	0  4  magic    "BSUM"
//	4  2  format   2 (1: no label area)
//	6  2  reserved
//	8  8  ino      back-pointer: the file this object belongs to
//	16 4  comp     back-pointer: which component of the file's layout
//	20 4  reserved
//	24 8  version  layout version the object was last written under;
//	               requests with an older version are refused (stale)
//	32 28 reserved
//	60 4  crc      CRC32C of bytes 0..59
//
// Format 2 then keeps bytes 64..4095 for the object's label (label.go:
// length, CRC32C, an mdsproto.ObjectLabel (CBOR; JSON before) naming the file's path, layout and size, written by
// the MDS for scavenging). Then comes one little-endian CRC32C per 4 KiB
// block of the data file, block b at offset 4096+4b (64+4b in format 1). A block's CRC covers the whole 4 KiB with bytes
// past the end of the data file taken as zeros, so the last block's
// checksum stays valid when the file grows. An entry of 0 over an all-zero
// block is a hole: never written, or punched (a stage's segment of zeros,
// stage.go: the block is deallocated and its entry zeroed). A block whose data does not match
// its entry is reported as corruption (wire.ErrCorrupt), never returned.
//
// Small objects live in the pack: a log of checksummed records, one image
// (version, block checksums, data) per change, group-committed (one fsync
// covers every request waiting), compacted in the background, read back
// into an in-memory index at start (pack.go, packfmt.go, packobj.go,
// packcompact.go). An object that grows past 64 KiB moves to its own
// files; objects of a store from before the pack are moved in by
// Migrate. An object lives in one place: if the pack holds it, files of
// it are leftovers of a move a crash interrupted, removed at open before
// any request is served.
//
// Durability: writes go to the page cache (write-behind), or, for the
// 4 KiB-aligned middle of a write of 256 KiB or more on a disk-backed file
// system, straight to the device (O_DIRECT, direct.go); either way they
// are acknowledged before they are durable. A Sync request (or a write flagged sync) fsyncs the data and
// sum files before answering, and only then does the client report the data
// durable. A new object's directory is fsynced with its first sync. A
// failed fsync stops the process: the kernel may have dropped the dirty
// pages, so carrying on would acknowledge lost data. A SyncAll request
// makes every write taken before it durable: the pack's log (one group
// fsync) and the objects in files written since their last sync, which
// the store lists (up to 4096; past it such a write syncs at once). The
// OSD's upkeep runs one every heartbeat, so writes a client closed under
// the async policy are durable within one even if the client died
// (syncall.go).
//
// A Sync (or any update) under a newer layout version than an object's
// raises the object's version: that is how a repair fences writers still
// holding the old capability.
//
// Staged writes (stage.go; the protocol's decisions are
// internal/core/staged's): a stage is a side file, fsynced, the object
// untouched. An OSD replaces an applied or aborted stage with a
// tombstone (.app or .abt, kept an hour), so an apply sent again is
// done, an apply of an aborted stage and a stage arriving after its
// outcome are refused, and "not found" means only "never staged here"
// (the writer then has the unit rebuilt, never counts it as applied). A
// stage's segments of zeros are punched with fallocate on apply, their
// checksums a hole's.
//
// Capabilities (internal/capability): a capability names a file (ino),
// rights (read, write), the layout version and an expiry, signed with
// HMAC-SHA256 under a cluster key. The OSD refuses forged, expired,
// other-file, insufficient-rights and stale (older layout version than
// the object's) requests; clients fetch a new capability on refusal.
// The keys rotate: the MDS hands its key ring out in heartbeat answers
// and the OSD reports the ids it holds (internal/mds/keyring.go).
// Heartbeats are signed with the cluster key and refused if their
// timestamp is more than 10 minutes off.
//
// Capacity counts each disk once. An OSD names the file system its
// directory is on (host name, machine id and device number) in its
// heartbeat with that file system's size and free space;
// mdsproto.SumCapacity counts OSDs naming one disk together (at most
// the disk, at most their quotas), for status and statfs alike. The
// disk fields are signed with the rest of the heartbeat when present,
// so an MDS older than them rejects a newer OSD's heartbeat where
// heartbeats are checked by signature (clusters without credentials):
// upgrade MDS processes before OSDs.
//
// Also here: data maps of which units hold data (datamap.go, OpDataMap:
// check, scrub and rebuild read what was written, not holes); object
// labels for scavenging (label.go); objects removed from under the
// store noticed within a second; the process's boot, a random number
// per start named in every Write, Sync, Read and Stat reply so a writer
// knows when unsynced writes may have been lost (internal/osdproto);
// deletions that fsync their directory once per request (an object the
// MDS was told is gone must not come back after a power cut, held by no
// file). The disk is reached through the FS interface: OSFS, the
// capacity-limiting LimitFS, FaultFS to inject errors, and the
// simulation's internal/simdisk.
package osd
