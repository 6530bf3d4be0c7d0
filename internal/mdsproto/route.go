package mdsproto

import (
	"strings"

	"github.com/braidfs/braid/internal/core/route"
)

// Routing requests among several active MDS processes (the MDS's
// routing.go and multi.go). Every inode number carries its slot in its
// low SlotBits bits; the routing table (OpRoute) names the process that
// serves each slot. A request about one file's state (its handles'
// leases, its extent locks, its commits and marks, its staged writes) is
// served only there; others answer ErrMoved, and the client asks for the
// table again. Everything else any active process serves.

// SlotBits is how many low bits of an inode number are its slot.
const SlotBits = route.SlotBits

// SlotOf is the slot of inode ino.
func SlotOf(ino uint64) int { return int(ino & (1<<SlotBits - 1)) }

// RoutedByIno is a request that only the owner of one inode's slot
// serves: RouteIno names the inode (0: none, any process serves it).
type RoutedByIno interface{ RouteIno() uint64 }

// RoutedByPath is a request that only the owner of a slot serves, where
// the client names the inode by path: the file (Parent false) or the
// directory it is in (Parent true), from directory Dir (0: the root).
// ok is false when the request needs no owner.
type RoutedByPath interface {
	RoutePath() (path string, dir uint64, parent bool, ok bool)
}

func (r CommitReq) RouteIno() uint64    { return r.Ino }
func (r MarkDirtyReq) RouteIno() uint64 { return r.Ino }
func (r RenewReq) RouteIno() uint64     { return r.Ino }
func (r ExtentReq) RouteIno() uint64    { return r.Ino }
func (r ReclaimReq) RouteIno() uint64   { return r.Ino }
func (r IntentReq) RouteIno() uint64    { return r.Ino }

// RouteIno: an open that takes a handle's lease, by inode.
func (r OpenReq) RouteIno() uint64 {
	if r.Handle == 0 {
		return 0
	}
	return r.Ino
}

// RoutePath: an open by path that takes a handle's lease.
func (r OpenReq) RoutePath() (string, uint64, bool, bool) {
	return r.Path, 0, false, r.Handle != 0 && r.Ino == 0
}

// RouteIno: a create that takes a handle's lease, named in directory Dir
// by one name, is its directory's owner's (a new file is born in its
// directory's slot).
func (r CreateReq) RouteIno() uint64 {
	if r.Handle == 0 || r.Dir == 0 || strings.Contains(r.Path, "/") {
		return 0
	}
	return r.Dir
}

// RoutePath: a create that takes a handle's lease, by path.
func (r CreateReq) RoutePath() (string, uint64, bool, bool) {
	return r.Path, r.Dir, true, r.Handle != 0 && r.RouteIno() == 0
}

// RouteIno: a batch of renewals goes to the owner of its first lease's
// file (clients batch by owner).
func (r RenewBatchReq) RouteIno() uint64 {
	if len(r.Leases) == 0 {
		return 0
	}
	return r.Leases[0].Ino
}
