package mds

import (
	"encoding/binary"

	"github.com/braidfs/braid/internal/kv"
)

// keys.go holds every key of the metadata engine: the key space below,
// each key's constructor, each prefix's range and each key's decoder.
// Nothing else in the MDS spells a prefix. The key space:
// A "record" is record.go's format 2
// (format byte, CRC32C, CBOR body; format 1 JSON still read):
//
//	i<ino be64>              inode record (inodeRec)
//	t<ino be64>              a directory's mtime and ctime (dirTimesRec; dirtimes.go)
//	d<parent be64><name>     directory entry → child ino (be64)
//	g<ino be64><version be64> objects of a removed file awaiting deletion (gcRec)
//	n<ino be64><txid be64>   an intent: a staged partial-stripe write (intentRec)
//	x<ino be64>              an orphan: unlinked while open, deleted at the last close
//	w<dir be64>              a write-back claim on a directory (claimRec; claim_ops.go)
//	h<ino be64>              repair index: the file has dirty components or a repair lock
//	l<ino be64>              the file cannot be read: lost beyond its parity (lostRec; damage.go)
//	o<osd id be32>           OSD record (osdRec)
//	q<ino be64>              a scrub asked for by an MDS process that does not lead (multi.go)
//	r<session be64><seq be64> a named mutation's outcome, for its retries (onceRec; once.go)
//	u<uuid>                  OSD uuid → id (be32)
//	O/<uuid>                 OSD uuid → the principal it is bound to (authz.go)
//	S3u/<name>, S3k/<access> S3 users, their secrets sealed (s3users.go)
//	S3i/<uid be64>/<name>    S3 users by the uid they act as
//	s/next_ino, s/next_osd   counters (be64); s/next_ino is taken a range at a time (inorange.go)
//	s/cluster                cluster record (clusterRec)
//	s/capkeys                the capability key ring, sealed, when MDS processes share the store (keyring.go)
//	s/locks_held, s/cache_held  marks: extent locks or caches may be held (a restart waits a lease)
//	s/incarnation            MDS starts so far: names the locks a process granted
//	s/osdmap                 the OSD map the leader publishes (multi.go)
//	s/route, s/route-epoch   the routing table and its epoch (routing.go)
//	S3n                      the next uid an S3 user gets (be64)
//
// On etcd these are under "<prefix>d/"; beside them, outside the data,
// kv keeps its clock, the lead lock ("<prefix>lead/"), the MDS
// processes' records ("<prefix>mds/<name>", etcdmembers.go) and the key
// fingerprint ("<prefix>keys").

// Key prefixes.
const (
	pInode       = 'i'
	pDirTimes    = 't'
	pDirent      = 'd'
	pGC          = 'g'
	pIntent      = 'n'
	pOrphan      = 'x'
	pClaim       = 'w'
	pRepair      = 'h'
	pLost        = 'l'
	pOSD         = 'o'
	pOnce        = 'r'
	pScrubWanted = 'q'
	pUUID        = 'u'
)

// Singleton keys.
var (
	keyNextIno      = []byte("s/next_ino")
	keyNextOSD      = []byte("s/next_osd")
	keyCluster      = []byte("s/cluster")
	keyCapRing      = []byte("s/capkeys")
	keyLocksHeld    = []byte("s/locks_held")
	keyCacheHeld    = []byte("s/cache_held")
	keyIncarnation  = []byte("s/incarnation")
	keyOSDMap       = []byte("s/osdmap")
	keyRoute        = []byte("s/route")
	keyRouteEpoch   = []byte("s/route-epoch")
	s3NextUidKey    = []byte("S3n")
	s3UserPrefix    = []byte("S3u/")
	s3AccessPrefix  = []byte("S3k/")
	s3UidPrefixBase = []byte("S3i/")
	osdOwnerPrefix  = []byte("O/")
)

func be64(prefix byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefix}, n)
}

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func inodeKey(ino uint64) []byte        { return be64(pInode, ino) }
func dirTimesKey(ino uint64) []byte     { return be64(pDirTimes, ino) }
func direntPrefix(parent uint64) []byte { return be64(pDirent, parent) }
func gcKey(ino, version uint64) []byte  { return binary.BigEndian.AppendUint64(be64(pGC, ino), version) }
func intentPrefix(ino uint64) []byte    { return be64(pIntent, ino) }
func intentKey(ino, txid uint64) []byte {
	return binary.BigEndian.AppendUint64(intentPrefix(ino), txid)
}
func orphanKey(ino uint64) []byte { return be64(pOrphan, ino) }
func claimKey(dir uint64) []byte  { return be64(pClaim, dir) }
func repairKey(ino uint64) []byte { return be64(pRepair, ino) }
func lostKey(ino uint64) []byte   { return be64(pLost, ino) }
func osdKey(id uint32) []byte     { return binary.BigEndian.AppendUint32([]byte{pOSD}, id) }
func onceKey(session, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(be64(pOnce, session), seq)
}
func scrubWantedKey(ino uint64) []byte { return be64(pScrubWanted, ino) }
func uuidKey(u string) []byte          { return append([]byte{pUUID}, u...) }
func osdOwnerKey(uuid string) []byte   { return append(append([]byte(nil), osdOwnerPrefix...), uuid...) }
func s3UserKey(name string) []byte     { return append(append([]byte(nil), s3UserPrefix...), name...) }
func s3AccessKey(access string) []byte {
	return append(append([]byte(nil), s3AccessPrefix...), access...)
}
func direntKey(parent uint64, name string) []byte {
	return append(direntPrefix(parent), name...)
}

// firstKey and pastKeys bound the keys of a prefix: [firstKey, pastKeys).
func firstKey(p byte) []byte { return []byte{p} }
func pastKeys(p byte) []byte { return []byte{p + 1} }

// pastPrefix is the first key after every key starting with prefix.
func pastPrefix(prefix []byte) []byte { return kv.PrefixEnd(prefix) }

// inoOfKey decodes a key of one inode number (i, t, x, w, h, l, q); a
// key of another length (a damaged store's) is not one.
func inoOfKey(k []byte) (uint64, bool) {
	if len(k) != 9 {
		return 0, false
	}
	return beUint64(k[1:9]), true
}

// pairOfKey decodes a key of two numbers (g: ino, version; n: ino,
// txid; r: session, seq).
func pairOfKey(k []byte) (a, b uint64, ok bool) {
	if len(k) != 17 {
		return 0, 0, false
	}
	return beUint64(k[1:9]), beUint64(k[9:17]), true
}

// direntOfKey decodes a directory entry's key: its directory and name.
func direntOfKey(k []byte) (parent uint64, name string, ok bool) {
	if len(k) < 9 || k[0] != pDirent {
		return 0, "", false
	}
	return beUint64(k[1:9]), string(k[9:]), true
}
