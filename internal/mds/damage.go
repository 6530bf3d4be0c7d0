package mds

// Files whose data is lost, and what happened to files' data lately, for
// status (mdsproto/damage.go). A worker that finds a stripe it cannot
// decode whatever OSDs return reports the file lost (RepairDoneReq.Lost):
// the MDS keeps that in the store ('l'<ino>, lostRec), so status names
// the file, and says health "lost", until a later repair or scrub reads
// the file whole again or the file is removed (deleteInode). The last
// maxFileEvents losses, repairs and rebuilds are kept in memory with the
// file's path and why.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
)

// maxFileEvents bounds the file events status lists.
const maxFileEvents = 32

// lostRec is a file known to be unreadable, keyed l<ino be64>.
type lostRec struct {
	Format  int    `json:"v"`
	Why     string `json:"why"`
	SinceNs int64  `json:"since_ns"`
	LastNs  int64  `json:"last_ns"`
}

// noteLost records in tx that ino cannot be read, and why.
func noteLost(tx kv.Txn, ino uint64, why string, nowNs int64) error {
	var lr lostRec
	v, err := tx.Get(lostKey(ino))
	if err != nil {
		return err
	}
	if v != nil {
		_ = decodeRecord(v, &lr) // a record that does not decode is replaced
	}
	if lr.SinceNs == 0 {
		lr.SinceNs = nowNs
	}
	lr.Format, lr.Why, lr.LastNs = recFormat, why, nowNs
	return putRecord(tx, lostKey(ino), &lr)
}

// lostFiles is every file known to be lost: those with a record, and
// those the health scan found (planned, without a record: a writer's
// missed writes beyond parity, or OSDs out of the cluster). It returns
// how many there are and the first mdsproto.MaxLostListed with their
// paths.
func lostFiles(r kv.Reader, planned []mdsproto.LostFile) (count int64, listed []mdsproto.LostFile, err error) {
	var found []mdsproto.LostFile
	seen := map[uint64]bool{}
	err = r.Scan(firstKey(pLost), pastKeys(pLost), func(k, v []byte) bool {
		var lr lostRec
		if ino, ok := inoOfKey(k); ok && decodeRecord(v, &lr) == nil {
			found = append(found, mdsproto.LostFile{Ino: ino, Why: lr.Why, SinceNs: lr.SinceNs, LastNs: lr.LastNs})
			seen[ino] = true
		}
		return true
	})
	if err != nil {
		return 0, nil, err
	}
	for _, f := range planned {
		if !seen[f.Ino] {
			found = append(found, f)
		}
	}
	for _, f := range found {
		rec, err := getInodeNoTimes(r, f.Ino)
		if err != nil || rec.Unnamed || rec.Nlink == 0 {
			continue // removed (deleteInode takes its record with it), or awaiting deletion
		}
		count++
		if len(listed) < mdsproto.MaxLostListed {
			f.Path = pathOf(r, rec)
			listed = append(listed, f)
		}
	}
	return count, listed, nil
}

// lostProblem is status's line about lost files.
func lostProblem(count int64, listed []mdsproto.LostFile) string {
	names := make([]string, 0, min(len(listed), 5))
	for _, f := range listed[:min(len(listed), 5)] {
		name := f.Path
		if name == "" {
			name = fmt.Sprintf("inode %d", f.Ino)
		}
		since := ""
		if f.SinceNs != 0 {
			since = ", since " + time.Unix(0, f.SinceNs).UTC().Format(time.RFC3339)
		}
		names = append(names, fmt.Sprintf("%s (%s%s)", name, f.Why, since))
	}
	more := ""
	if int64(len(names)) < count {
		more = fmt.Sprintf(", and %d more", count-int64(len(names)))
	}
	return fmt.Sprintf("%d files cannot be read: more of a stripe is lost or corrupt than its parity rebuilds (restore them from a backup, or remove them): %s%s",
		count, strings.Join(names, "; "), more)
}

// noteFileEventLocked adds an event to the recent ones (s.repairs.mu held).
// One that repeats an earlier (a lost file's repair, retried) moves that
// one to the end, with the new time.
func (q *repairQueue) noteFileEventLocked(e mdsproto.FileEvent) {
	q.events = slices.DeleteFunc(q.events, func(o mdsproto.FileEvent) bool {
		return o.Ino == e.Ino && o.What == e.What && o.Why == e.Why
	})
	q.events = append(q.events, e)
	if len(q.events) > maxFileEvents {
		q.events = q.events[1:]
	}
}

// repairEvent is the file event a repair's result makes, if any: a loss,
// what a scrub found and rewrote, or a rebuild and why.
func repairEvent(req mdsproto.RepairDoneReq, failed, why, path string, nowNs int64) (mdsproto.FileEvent, bool) {
	e := mdsproto.FileEvent{Ino: req.Ino, Path: path, AtNs: nowNs}
	switch {
	case req.Lost != "":
		e.What, e.Why = mdsproto.FileLost, req.Lost
	case failed != "":
		return e, false
	case req.Kind == mdsproto.RepairScrub && (req.Repaired > 0 || len(req.Found) > 0):
		e.What = mdsproto.FileRepaired
		e.Why = fmt.Sprintf("scrub rewrote %d units", req.Repaired)
		if len(req.Found) > 0 {
			e.Why = strings.Join(req.Found, "; ")
		}
	case req.Kind != mdsproto.RepairScrub:
		e.What, e.Why = mdsproto.FileRebuilt, why
	default:
		return e, false
	}
	return e, true
}
