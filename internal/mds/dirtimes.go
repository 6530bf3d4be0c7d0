package mds

import (
	"github.com/braidfs/braid/internal/kv"
)

// A directory's mtime and ctime live in a record of their own beside its
// inode record, so that a change of an entry (create, remove, a file
// renamed) writes them without reading them: the transaction reads the
// directory's inode record only for its type, owner and mode, which
// entries do not change, and concurrent creates in one directory no
// longer conflict on it (on etcd each was retried; an optimistic engine
// checks what a transaction read, not what it wrote). Concurrent changes
// each set the times to their own now, and the last commit's stands: it
// may be a little earlier than the other's (by less than the time the two
// overlapped), so a directory's mtime can step back that much.
//
//	t<ino>  {"v":1,"m":mtime_ns,"c":ctime_ns}   (record.go's encoding)
//
// The times record, where there is one, is the directory's times; the
// inode record's copy is kept (written with it) for stores read before
// the record existed. putInode writes both; a directory read without its
// times (getInodeNoTimes) cannot be stored until they are set.

type dirTimesRec struct {
	Format  int   `json:"v"`
	MtimeNs int64 `json:"m"`
	CtimeNs int64 `json:"c"`
}

// readDirTimes sets dir's times from its times record, if it has one.
func readDirTimes(r kv.Reader, dir *inodeRec) error {
	var t dirTimesRec
	ok, err := getRecord(r, dirTimesKey(dir.Ino), &t)
	if err != nil {
		return err
	}
	if ok {
		dir.MtimeNs, dir.CtimeNs = t.MtimeNs, t.CtimeNs
	}
	dir.timesUnread = false
	return nil
}

func putDirTimes(tx kv.Txn, dir *inodeRec) error {
	return putRecord(tx, dirTimesKey(dir.Ino), &dirTimesRec{Format: recFormat, MtimeNs: dir.MtimeNs, CtimeNs: dir.CtimeNs})
}

// touchDir records that dir's entries changed at nowNs, without reading
// or writing its inode record. A caching requester is handed the
// directory as it now is (dir, with these times), as if it were stored.
func touchDir(tx kv.Txn, dir *inodeRec, nowNs int64) error {
	dir.MtimeNs, dir.CtimeNs, dir.timesUnread = nowNs, nowNs, false
	if err := putDirTimes(tx, dir); err != nil {
		return err
	}
	if tt, ok := tx.(*touchTxn); ok {
		dir.Format = recFormat
		b, err := encodeRecord(dir)
		if err != nil {
			return err
		}
		tt.note(inodeKey(dir.Ino), b)
	}
	return nil
}

// setDirTimes sets dir's times to nowNs before it is stored whole (its
// link count changed too).
func setDirTimes(dir *inodeRec, nowNs int64) {
	dir.MtimeNs, dir.CtimeNs, dir.timesUnread = nowNs, nowNs, false
}
