package client

import (
	"context"
	"sync"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/osdproto"
)

// Data maps: which units of a file's component objects hold data, asked
// of each OSD in one request per component (osdproto.OpDataMap), so the
// checker and scrub read what was written rather than the holes of a
// sparse file. A stripe every unit of which is a hole is all zeros, and
// zeros are a consistent stripe (parity of zeros is zeros): it needs no
// reading. A stripe is taken for a hole only when at least K of its units
// are known holes and none is known to hold data (K units fix the rest
// of a stripe, so the others are zeros too); a unit whose component is
// dirty, or whose OSD did not answer, is not known.

// unitMap is what the data maps say of one file's components.
type unitMap struct {
	bits  [][]byte               // by component; nil: not known
	units []int64                // units asked for, by component (past them: not known)
	infos []*osdproto.ObjectInfo // the objects' lengths and versions, by component; nil: not known
}

// dataMaps asks every clean component's OSD which of its units hold data
// (in parallel), up to the objects' lengths the file's stored size
// implies.
func (f *File) dataMaps(ctx context.Context) unitMap {
	lay := f.layout()
	n := len(lay.OSDs)
	m := unitMap{bits: make([][]byte, n), units: make([]int64, n), infos: make([]*osdproto.ObjectInfo, n)}
	size, U := f.storedSize(), lay.Spec.UnitBytes
	var wg sync.WaitGroup
	for c := range n {
		if f.isDirty(c) {
			continue
		}
		units := min(max(1, (lay.ObjectLen(size, c)+U-1)/U), osdproto.MaxDataMapUnits)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, (units+7)/8)
			meta, err := f.unitCall(ctx, osdproto.OpDataMap, c, osdproto.Req{Off: 0, Len: uint32(U), Units: uint32(units)}, nil, buf)
			if err != nil {
				return
			}
			info, err := osdproto.DecodeObjectInfo(meta)
			if err != nil {
				return
			}
			m.bits[c], m.units[c], m.infos[c] = buf, units, &info
		}()
	}
	wg.Wait()
	return m
}

// hole reports whether file stripe fs is known to hold no data.
func (m unitMap) hole(lay layout.Layout, fs int64) bool {
	return osdproto.StripeHole(lay.Spec.Width(), lay.Spec.K, func(u int) (known, data bool) {
		loc := lay.UnitOf(fs, u)
		b, i := m.bits[loc.Component], loc.ObjectOff/lay.Spec.UnitBytes
		if b == nil || i >= m.units[loc.Component] {
			return false, false
		}
		return true, osdproto.BitSet(b, i)
	})
}
