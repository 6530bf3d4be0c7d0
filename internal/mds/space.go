package mds

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braidfs/braid/internal/mdsproto"
)

// spaceCheckEvery is how often the store's free space is looked at.
const spaceCheckEvery = time.Second

// freeSpace caches whether the store's disk is below its reserve.
type freeSpace struct {
	mu      sync.Mutex
	checked time.Time
	isLow   bool
}

// low reports whether dir's disk has fewer than minFree bytes free, as of
// at most spaceCheckEvery ago. A disk that cannot be asked counts as not
// low: the commit itself will say.
func (f *freeSpace) low(dir string, minFree int64, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.checked) < spaceCheckEvery && !f.checked.IsZero() {
		return f.isLow
	}
	f.checked = now
	var st unix.Statfs_t
	if dir == "" || unix.Statfs(dir, &st) != nil {
		f.isLow = false
		return false
	}
	f.isLow = int64(st.Bavail)*int64(st.Bsize) < minFree
	return f.isLow
}

// addsToNamespace reports whether op makes something new: what a nearly
// full disk refuses (removals, renames and attribute changes go on).
func addsToNamespace(op uint16) bool {
	switch op {
	case mdsproto.OpMkdir, mdsproto.OpCreate, mdsproto.OpSymlink, mdsproto.OpLink, mdsproto.OpMknod, mdsproto.OpDirClaim:
		return true
	}
	return false
}
