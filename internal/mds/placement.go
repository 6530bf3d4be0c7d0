package mds

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/wire"
)

// Candidate is an OSD placement may choose.
type Candidate struct {
	ID        uint32
	FreeBytes int64
}

// maxGroups bounds how many parity groups one file is spread over.
const maxGroups = 16

// Place decides where a new file's components go: groups of spec.Width()
// distinct OSDs each (a file never puts two components of one parity group
// on one OSD). It is a pure decision: the caller supplies the up OSDs and
// the randomness. Files whose size is known to fit one visit use one
// group; larger or unknown-size files use as many groups as the cluster
// can fill, which declusters both I/O and rebuild.
func Place(spec layout.Spec, sizeHint int64, up []Candidate, rng *rand.Rand) (layout.Layout, error) {
	w := spec.Width()
	if len(up) < w {
		return layout.Layout{}, wire.Errorf(wire.ErrUnavail,
			"layout %s needs %d OSDs, cluster has %d up", spec, w, len(up))
	}
	groups := 1
	if sizeHint < 0 || sizeHint > spec.StripeBytes()*int64(spec.Visit) {
		groups = min(len(up)/w, maxGroups)
	}
	ids := make([]uint32, 0, groups*w)
	for g := 0; g < groups; g++ {
		ids = append(ids, pickDistinct(up, w, rng)...)
	}
	return layout.Layout{Spec: spec, Groups: groups, OSDs: ids, Version: 1}, nil
}

// pickDistinct draws n distinct OSDs, each with probability weighted by
// its free space (Efraimidis–Spirakis sampling), so fuller OSDs fill
// more slowly without ever being excluded.
func pickDistinct(up []Candidate, n int, rng *rand.Rand) []uint32 {
	type keyed struct {
		id  uint32
		key float64
	}
	ks := make([]keyed, len(up))
	for i, c := range up {
		w := float64(max(c.FreeBytes, 1<<20)) // an OSD reporting no space still gets a tiny weight
		ks[i] = keyed{c.ID, math.Pow(rng.Float64(), 1/w)}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].key > ks[j].key })
	out := make([]uint32, n)
	for i := range out {
		out[i] = ks[i].id
	}
	return out
}

// smallFileSpec is the layout a file known to be small gets instead of its
// coded one: mirrored with the same fault tolerance (Panasas mirrors small
// files; coding a few KiB costs more than it saves).
func smallFileSpec(s layout.Spec, sizeHint int64) layout.Spec {
	if sizeHint < 0 || sizeHint >= layout.SmallFileBytes || s.Scheme == layout.Mirror {
		return s
	}
	return layout.Spec{Scheme: layout.Mirror, K: 1, M: s.M, UnitBytes: s.UnitBytes, Visit: s.Visit, Sealed: s.Sealed}
}
