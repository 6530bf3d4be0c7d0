package repairworker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Scrub: every unit of a stripe read and verified, what is wrong rewritten
// from the rest; a stripe lost beyond parity told from one unreachable;
// the holes of sparse files skipped (datamap.go).

// noteFound records what scrub found wrong with a unit, for status.
func (j *repairJob) noteFound(c int, s int64, what string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.found) < mdsproto.MaxRepairFound {
		j.found = append(j.found, fmt.Sprintf("component %d, stripe %d: %s", c, s, what))
	}
}

// stripeLost is a stripe that cannot be decoded whatever OSDs return:
// more of its units are lost or corrupt than its parity rebuilds. The
// worker reports it as the file's loss (RepairDoneReq.Lost).
type stripeLost struct {
	what string // which stripe, how many units gone
	err  error  // the failure as it was (wire.ErrUnavail)
}

func (e *stripeLost) Error() string { return e.err.Error() }

func (e *stripeLost) Unwrap() error { return e.err }

// lostOrUnavail is the error for a stripe of group grp with fewer than K
// of its units readable, of which gone are lost or corrupt and can units
// could be read at best.
func lostOrUnavail(err error, grp int, s int64, gone, can, k int) error {
	if can-gone >= k {
		return err // unreachable units may come back
	}
	return &stripeLost{what: fmt.Sprintf("stripe %d of parity group %d: %d units lost or corrupt, %d left where %d are needed", s, grp, gone, can-gone, k), err: err}
}

// goneErr reports whether err says a unit is lost or corrupt (not merely
// unreachable).
func goneErr(err error) bool {
	return errors.Is(err, wire.ErrLost) || errors.Is(err, wire.ErrCorrupt)
}

// dataMaps asks each source's OSD which units of its object hold data
// (datamap.go), up to its group's extent: nil where it did not answer.
// A scrub or rebuild then skips the stripes of a sparse file's holes (a
// rebuild's targets were cleared: left alone, their holes read as zeros).
func (j *repairJob) dataMaps(ctx context.Context, extents []int64) [][]byte {
	w, U := j.lay.Spec.Width(), j.lay.Spec.UnitBytes
	maps := make([][]byte, len(j.lay.OSDs))
	var wg sync.WaitGroup
	for c := range j.sources {
		units := min(max(1, (extents[c/w]+U-1)/U), osdproto.MaxDataMapUnits)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, (units+7)/8)
			req := osdproto.Req{Comp: uint32(c), Off: 0, Len: uint32(U), Units: uint32(units)}
			if _, err := j.call(ctx, j.osdOf(c, true), osdproto.OpDataMap, req, nil, buf); err == nil {
				maps[c] = buf // written by this goroutine alone
			}
		}()
	}
	wg.Wait()
	return maps
}

// hole reports whether stripe s of group grp holds no data: at least K
// of its units known to be holes, none known to hold data.
func (j *repairJob) hole(maps [][]byte, grp int, s int64) bool {
	w, U := j.lay.Spec.Width(), j.lay.Spec.UnitBytes
	return osdproto.StripeHole(w, j.lay.Spec.K, func(col int) (known, data bool) {
		c := grp*w + col
		b := maps[c]
		objLen, stated := j.objLens[c]
		switch {
		case b == nil || s >= int64(len(b))*8:
			return false, false // not known (past the map: the extent grew since)
		case !stated || s*U >= objLen && s*U < j.recorded(c):
			return false, false // the object ends before data was written here: read, to be found lost
		}
		return true, osdproto.BitSet(b, s)
	})
}

// scrubStripe reads every unit of the stripe, checks each block's checksum
// (the OSD reports a mismatch as corruption) and the stripe's parity, and
// rewrites what is wrong from the rest. Only the columns holding file data
// are checked: past the end, units may hold bytes no parity covers.
func (j *repairJob) scrubStripe(ctx context.Context, s int64, units []int, extent int) error {
	spec := j.lay.Spec
	w := spec.Width()
	grp := units[0] / w
	valid := j.validBytes(grp, s)
	if valid <= 0 {
		return nil
	}
	n := int(min(valid, spec.UnitBytes, int64(extent)))
	if err := waitN(ctx, j.lim, n*w); err != nil {
		return err
	}
	shards := make([][]byte, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for u, c := range units {
		shards[u] = wire.GetBuf(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[u] = j.readUnit(ctx, c, s, shards[u])
		}()
	}
	wg.Wait()
	defer putShards(shards)
	var bad []int
	present := 0
	for u := range units {
		switch {
		case errs[u] == nil:
			present++
			j.read.Add(int64(n))
		case errors.Is(errs[u], wire.ErrLost):
			// A lost object is not rewritten here unit by unit (readers
			// would meet its unfilled holes): marked dirty, it is rebuilt
			// whole while readers decode around it.
			j.noteUnwritable(units[u])
			j.noteFound(units[u], s, "object lost: "+errs[u].Error())
			wire.PutBuf(shards[u])
			shards[u] = nil
		case errors.Is(errs[u], wire.ErrCorrupt):
			bad = append(bad, u)
			j.noteFound(units[u], s, "data corrupt: "+errs[u].Error())
			wire.PutBuf(shards[u])
			shards[u] = nil
		default:
			wire.PutBuf(shards[u])
			shards[u] = nil
		}
	}
	if present < spec.K {
		gone := 0
		for u := range units {
			if goneErr(errs[u]) {
				gone++
			}
		}
		return lostOrUnavail(fmt.Errorf("%w: stripe %d of group %d: %d of %d units readable: %w",
			wire.ErrUnavail, s, grp, present, spec.K, errors.Join(errs...)), grp, s, gone, w, spec.K)
	}
	if present == w {
		var err error
		if bad, err = j.findInconsistent(shards); err != nil {
			return err
		}
		for _, u := range bad {
			j.noteFound(units[u], s, "data corrupt: disagrees with the stripe's parity")
			wire.PutBuf(shards[u])
			shards[u] = nil
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if err := j.enc.Reconstruct(shards); err != nil {
		return fmt.Errorf("%w: decode stripe %d: %v", wire.ErrUnavail, s, err)
	}
	for _, u := range bad {
		if err := j.writeUnit(ctx, units[u], s, wholeBlocks(shards[u], spec.UnitBytes)); errors.Is(err, wire.ErrLost) {
			j.noteUnwritable(units[u]) // its object is unusable as a whole: rebuilt instead
			continue
		} else if err != nil {
			return err
		}
		j.repaired.Add(1)
		j.mu.Lock()
		if j.rewritten == nil {
			j.rewritten = map[int]bool{}
		}
		j.rewritten[units[u]] = true
		j.mu.Unlock()
	}
	return nil
}

// wholeBlocks pads a unit's rewrite with zeros to a whole checksum block
// (at most the unit): a write of part of a block merges it with the
// block's old bytes, which fails when that block is the corrupt one being
// repaired. Past the file's end the stripe holds zeros anyway.
func wholeBlocks(b []byte, unit int64) []byte {
	n := min(unit, (int64(len(b))+osdBlockBytes-1)/osdBlockBytes*osdBlockBytes)
	if n == int64(len(b)) {
		return b
	}
	out := make([]byte, n)
	copy(out, b)
	return out
}

// findInconsistent returns the units of a fully read stripe to rewrite
// when every block passed its checksum but parity disagrees with the data:
// none if parity verifies; for mirrors, the copies that differ from the
// majority (the first copy wins a tie); for codes, the parity units,
// recomputed from the data. Checksums catch decayed bytes, so a stripe
// that is clean block by block yet inconsistent was torn by a writer that
// died between units: each data unit then holds old or new bytes, and
// recomputing parity keeps both kinds (RAID's rule after an unclean
// shutdown), where decoding a "suspect" data unit from parity would make
// up bytes that were never written.
func (j *repairJob) findInconsistent(shards [][]byte) ([]int, error) {
	ok, err := j.enc.Verify(shards)
	if err != nil || ok {
		return nil, err
	}
	spec := j.lay.Spec
	if spec.Scheme == layout.Mirror {
		return mirrorMinority(shards), nil
	}
	var parity []int
	for u := spec.K; u < spec.Width(); u++ {
		parity = append(parity, u)
	}
	return parity, nil
}

func mirrorMinority(shards [][]byte) []int {
	best, bestVotes := 0, 0
	for i := range shards {
		votes := 0
		for k := range shards {
			if string(shards[k]) == string(shards[i]) {
				votes++
			}
		}
		if votes > bestVotes {
			best, bestVotes = i, votes
		}
	}
	var out []int
	for i := range shards {
		if string(shards[i]) != string(shards[best]) {
			out = append(out, i)
		}
	}
	return out
}
