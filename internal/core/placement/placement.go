// Package placement decides where components go: a new file's OSDs
// (Place), a replacement for components that must move (Replace), and
// the layout a small file gets instead of its coded one (SmallFileSpec).
// The caller supplies the OSDs placement may use and the random source;
// placement does no I/O (Sigma's and Panasas's declustered placement:
// each file picks its own OSDs, weighted by free space, so rebuild reads
// spread over the whole cluster).
//
// Failure domains (Ceph's CRUSH rule, in braid's own decider): an OSD
// names its host and rack, and a parity group never puts two components
// in one host when the cluster has as many hosts as the group is wide,
// nor in one rack when it has as many racks. With fewer, components
// spread over the hosts first (a host fails far more often than a
// rack), then as evenly over the racks as that allows. Each pick takes,
// of the OSDs whose host then whose rack holds the fewest of the group,
// one drawn weighted by free space, so a cluster without named hosts and
// racks places as before. An OSD naming no host is a host of its own.
package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/braidfs/braid/internal/invariants"
	"github.com/braidfs/braid/internal/layout"
)

// ErrTooFewOSDs: the cluster has too few OSDs up for the layout.
var ErrTooFewOSDs = errors.New("too few OSDs")

// Candidate is an OSD placement may choose, with its failure domains.
type Candidate struct {
	ID        uint32
	FreeBytes int64
	Host      string // "": a host of its own
	Rack      string // "": the one unnamed rack
}

// hostID names an OSD's host, unique across racks; an OSD naming no
// host is a host of its own.
type hostID struct {
	rack, host string
	osd        uint32
}

func (h hostID) String() string {
	if h.host == "" {
		return fmt.Sprintf("osd %d", h.osd)
	}
	return h.rack + "/" + h.host
}

func (c Candidate) hostKey() hostID {
	if c.Host == "" {
		return hostID{osd: c.ID}
	}
	return hostID{rack: c.Rack, host: c.Host}
}

// spread counts a group's components per host and per rack.
type spread struct {
	hosts map[hostID]int
	racks map[string]int
}

func newSpread() spread { return spread{hosts: map[hostID]int{}, racks: map[string]int{}} }

func (s spread) add(c Candidate) {
	s.hosts[c.hostKey()]++
	s.racks[c.Rack]++
}

// fresh reports whether neither c's host nor its rack holds any of the
// group: no pick can do better.
func (s spread) fresh(c Candidate) bool { return s.hosts[c.hostKey()] == 0 && s.racks[c.Rack] == 0 }

// less reports whether a is the better pick than b for the group: its
// host holds fewer of the group, or as few and its rack fewer.
func (s spread) less(a, b Candidate) bool {
	ha, hb := s.hosts[a.hostKey()], s.hosts[b.hostKey()]
	if ha != hb {
		return ha < hb
	}
	return s.racks[a.Rack] < s.racks[b.Rack]
}

// MaxGroups bounds how many parity groups one file is spread over.
const MaxGroups = 16

// Place decides where a new file's components go: groups of spec.Width()
// distinct OSDs each (a file never puts two components of one parity group
// on one OSD). It is a pure decision: the caller supplies the up OSDs and
// the randomness. Files whose size is known to fit one visit use one
// group; larger or unknown-size files use as many groups as the cluster
// can fill, which declusters both I/O and rebuild.
func Place(spec layout.Spec, sizeHint int64, up []Candidate, rng *rand.Rand) (layout.Layout, error) {
	l, err := place(spec, sizeHint, up, rng)
	if invariants.Enabled && err == nil {
		invariants.Must(checkPlaced(l, up))
	}
	return l, err
}

func place(spec layout.Spec, sizeHint int64, up []Candidate, rng *rand.Rand) (layout.Layout, error) {
	w := spec.Width()
	if len(up) < w {
		return layout.Layout{}, fmt.Errorf("%w: layout %s needs %d OSDs, cluster has %d up", ErrTooFewOSDs, spec, w, len(up))
	}
	groups := 1
	if sizeHint < 0 || sizeHint > spec.StripeBytes()*int64(spec.Visit) {
		groups = min(len(up)/w, MaxGroups)
	}
	ids := make([]uint32, 0, groups*w)
	for g := 0; g < groups; g++ {
		ids = append(ids, pickSpread(up, w, newSpread(), rng)...)
	}
	return layout.Layout{Spec: spec, Groups: groups, OSDs: ids, Version: 1}, nil
}

// pickSpread draws n distinct OSDs for a group whose other components
// are counted in sp: each pick is, of the OSDs whose host and then rack
// hold the fewest of the group, one drawn weighted by free space, so
// fuller OSDs fill more slowly without ever being excluded. Small
// clusters draw by Efraimidis–Spirakis keys; large ones (pickScanMax
// and more OSDs, where a key per OSD per group costs too much) by
// repeated weighted draws, the same distribution at O(log n) a draw.
func pickSpread(up []Candidate, n int, sp spread, rng *rand.Rand) []uint32 {
	if len(up) >= pickScanMax {
		return pickSpreadLarge(up, n, sp, rng)
	}
	type keyed struct {
		c   Candidate
		key float64
	}
	ks := make([]keyed, len(up))
	for i, c := range up {
		ks[i] = keyed{c, math.Pow(rng.Float64(), 1/weight(c))}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].key > ks[j].key })
	out := make([]uint32, 0, n)
	taken := make([]bool, len(ks))
	for range n {
		best := -1
		for i, k := range ks {
			if !taken[i] && (best < 0 || sp.less(k.c, ks[best].c)) {
				best = i // ks is by key: the first of the fewest wins
			}
		}
		taken[best] = true
		sp.add(ks[best].c)
		out = append(out, ks[best].c.ID)
	}
	return out
}

// pickScanMax is the cluster size from which placement draws by
// weighted sampling instead of a key per OSD.
const pickScanMax = 512

// weight is an OSD's share of draws: its free space (an OSD reporting
// none still gets a tiny one).
func weight(c Candidate) float64 { return float64(max(c.FreeBytes, 1<<20)) }

// pickSpreadLarge draws each pick weighted by free space among the OSDs
// not taken, accepting the first whose host and rack hold none of the
// group (the best any pick can do); after maxFreshTries draws without
// one it draws among the OSDs of the fewest, as pickSpread does.
func pickSpreadLarge(up []Candidate, n int, sp spread, rng *rand.Rand) []uint32 {
	cum := make([]float64, len(up))
	total := 0.0
	for i, c := range up {
		total += weight(c)
		cum[i] = total
	}
	draw := func() int {
		return min(sort.SearchFloat64s(cum, rng.Float64()*total), len(up)-1)
	}
	taken := map[int]bool{}
	out := make([]uint32, 0, n)
	for range n {
		pick := -1
		for range maxFreshTries {
			if i := draw(); !taken[i] && sp.fresh(up[i]) {
				pick = i
				break
			}
		}
		if pick < 0 {
			pick = drawFewest(up, taken, sp, rng)
		}
		taken[pick] = true
		sp.add(up[pick])
		out = append(out, up[pick].ID)
	}
	return out
}

// maxFreshTries bounds the draws looking for a fresh host and rack.
const maxFreshTries = 64

// drawFewest draws, weighted by free space, among the OSDs not taken
// whose host and then rack hold the fewest of the group.
func drawFewest(up []Candidate, taken map[int]bool, sp spread, rng *rand.Rand) int {
	var best []int
	for i, c := range up {
		if taken[i] {
			continue
		}
		switch {
		case len(best) == 0 || sp.less(c, up[best[0]]):
			best = append(best[:0], i)
		case !sp.less(up[best[0]], c):
			best = append(best, i)
		}
	}
	total := 0.0
	for _, i := range best {
		total += weight(up[i])
	}
	x := rng.Float64() * total
	for _, i := range best {
		if x -= weight(up[i]); x < 0 {
			return i
		}
	}
	return best[len(best)-1]
}

// SmallFileSpec is the layout a file known to be small gets instead of its
// coded one: mirrored with the same fault tolerance (Panasas mirrors small
// files; coding a few KiB costs more than it saves).
func SmallFileSpec(s layout.Spec, sizeHint int64) layout.Spec {
	if sizeHint < 0 || sizeHint >= layout.SmallFileBytes || s.Scheme == layout.Mirror {
		return s
	}
	return layout.Spec{Scheme: layout.Mirror, K: 1, M: s.M, UnitBytes: s.UnitBytes, Visit: s.Visit, Sealed: s.Sealed}
}

// Replace chooses new OSDs for the components in move, preferring one that
// holds no component of the same parity group (so one OSD failure costs a
// group at most one component). When the cluster has fewer up OSDs than
// the group is wide, a component shares an OSD with another of its group
// rather than stay missing: the group then survives any one OSD failure
// again, and the component is moved apart once an OSD is added (Crowded).
// It returns the new OSD list; the caller bumps the version.
func Replace(l layout.Layout, move []int, up []Candidate, rng *rand.Rand) ([]uint32, error) {
	out, err := replace(l, move, up, rng)
	if invariants.Enabled && err == nil {
		invariants.Must(checkReplaced(l, move, up, out))
	}
	return out, err
}

func replace(l layout.Layout, move []int, up []Candidate, rng *rand.Rand) ([]uint32, error) {
	out := slices.Clone(l.OSDs)
	w := l.Spec.Width()
	byID := make(map[uint32]Candidate, len(up))
	for _, c := range up {
		byID[c.ID] = c
	}
	for _, c := range move {
		g := c / w
		var apart, shared []Candidate
		for _, cand := range up {
			if cand.ID == l.OSDs[c] {
				continue // the OSD it is leaving
			}
			if !slices.Contains(out[g*w:(g+1)*w], cand.ID) && !slices.Contains(l.OSDs[g*w:(g+1)*w], cand.ID) {
				apart = append(apart, cand)
			} else {
				shared = append(shared, cand)
			}
		}
		switch {
		case len(apart) > 0:
			// Spread as a new group would be, counting the group's
			// other components (those on OSDs not up have no domain
			// known here, and count for none).
			sp := newSpread()
			for i, id := range out[g*w : (g+1)*w] {
				if cand, ok := byID[id]; ok && g*w+i != c {
					sp.add(cand)
				}
			}
			out[c] = pickSpread(apart, 1, sp, rng)[0]
		case len(shared) > 0:
			out[c] = leastShared(out[g*w:(g+1)*w], shared)
		default:
			return nil, fmt.Errorf("%w: no up OSD can take component %d", ErrTooFewOSDs, c)
		}
	}
	return out, nil
}

// leastShared picks the candidate holding the fewest components of group,
// so doubled-up components spread over the group's OSDs.
func leastShared(group []uint32, cands []Candidate) uint32 {
	best, bestN := cands[0].ID, len(group)+1
	for _, c := range cands {
		n := 0
		for _, id := range group {
			if id == c.ID {
				n++
			}
		}
		if n < bestN {
			best, bestN = c.ID, n
		}
	}
	return best
}

// checkPlaced: a new layout is valid, uses only candidates, never puts
// two components of one parity group on one OSD, and never two in one
// host (or rack) when the candidates span as many hosts (racks) as the
// group is wide.
func checkPlaced(l layout.Layout, up []Candidate) error {
	if err := l.Validate(); err != nil {
		return err
	}
	w := l.Spec.Width()
	byID := map[uint32]Candidate{}
	all := newSpread()
	for _, c := range up {
		byID[c.ID] = c
		all.add(c)
	}
	for g := range l.Groups {
		group := l.OSDs[g*w : (g+1)*w]
		sp := newSpread()
		for i, id := range group {
			c, ok := byID[id]
			if !ok {
				return fmt.Errorf("OSD %d placed but not a candidate", id)
			}
			if slices.Contains(group[:i], id) {
				return fmt.Errorf("parity group %d holds OSD %d twice: %v", g, id, group)
			}
			if sp.hosts[c.hostKey()] > 0 && len(all.hosts) >= w {
				return fmt.Errorf("parity group %d puts two components in host %v of %d hosts", g, c.hostKey(), len(all.hosts))
			}
			if sp.racks[c.Rack] > 0 && len(all.racks) >= w {
				return fmt.Errorf("parity group %d puts two components in rack %q of %d racks", g, c.Rack, len(all.racks))
			}
			sp.add(c)
		}
	}
	return nil
}

// checkReplaced: only the components in move changed, each to a
// candidate other than the OSD it left.
func checkReplaced(l layout.Layout, move []int, up []Candidate, out []uint32) error {
	if len(out) != len(l.OSDs) {
		return fmt.Errorf("replaced layout has %d components, had %d", len(out), len(l.OSDs))
	}
	for c, id := range out {
		if !slices.Contains(move, c) {
			if id != l.OSDs[c] {
				return fmt.Errorf("component %d moved from OSD %d to %d unasked", c, l.OSDs[c], id)
			}
			continue
		}
		if id == l.OSDs[c] || !slices.ContainsFunc(up, func(x Candidate) bool { return x.ID == id }) {
			return fmt.Errorf("component %d replaced by OSD %d (was %d), not an up candidate", c, id, l.OSDs[c])
		}
	}
	return nil
}
