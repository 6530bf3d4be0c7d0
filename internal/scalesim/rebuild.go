package scalesim

import (
	"slices"

	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/core/repair"
)

// rebuild is what repairing a set of lost OSDs costs.
type rebuild struct {
	Seconds      float64 // the slowest OSD's share: declustered rebuild runs everywhere at once
	Bytes        int64   // written
	Files        int64   // files repaired (all that the sample stands for)
	Unrepairable int64   // files beyond their parity
	Participants int     // OSDs that read or write
}

// rebuildOf assignments every sampled file with a component on a lost OSD
// as the MDS would (repair.DecideAssignment: the plan, the new OSDs), and
// sums what each OSD reads (K sources per rebuilt unit, or the one a
// mirror copies from) and writes. The world is left as it was.
func (w *world) rebuildOf(lost map[uint32]bool) rebuild {
	views := w.views(lost)
	cands := placement.NewPool(w.candidates(lost))
	load := map[uint32]float64{}
	var r rebuild
	seen := map[int]bool{}
	for _, id := range sortedIDs(lost) { // in order: the assignments draw from the random source
		for _, fc := range w.onOSD[id] {
			if seen[fc.file] {
				continue
			}
			seen[fc.file] = true
			f := &w.files[fc.file]
			r.Files += int64(f.weight)
			if repair.Plan(f.l.OSDs, nil, views, f.l.Spec).Unrepairable {
				r.Unrepairable += int64(f.weight)
				continue
			}
			c, ok, err := repair.DecideAssignment(f.l, nil, views, repair.KindRebuild, nil, cands, w.rng)
			if err != nil || !ok {
				continue
			}
			width := f.l.Spec.Width()
			for _, comp := range c.Comps {
				n := float64(w.compBytes(f, int(comp)))
				load[c.OSDs[comp]] += n // the write
				r.Bytes += int64(n)
				g := int(comp) / width
				reads := 0
				for _, src := range c.Sources {
					if int(src)/width == g && reads < f.l.Spec.K {
						load[f.l.OSDs[src]] += n // a source read
						reads++
					}
				}
			}
		}
	}
	for id, bytes := range load {
		if s := bytes / w.osds[id-1].bandwidth; s > r.Seconds {
			r.Seconds = s
		}
	}
	r.Participants = len(load)
	return r
}

// hostOSDs are the OSDs of host h.
func (w *world) hostOSDs(h int) map[uint32]bool {
	out := map[uint32]bool{}
	for _, o := range w.osds {
		if o.host == h {
			out[o.id] = true
		}
	}
	return out
}

// sortedIDs are a set's OSDs in order.
func sortedIDs(set map[uint32]bool) []uint32 {
	out := make([]uint32, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
