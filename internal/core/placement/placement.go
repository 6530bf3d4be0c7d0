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

// Pool is the candidates of a run of decisions with their hosts and
// racks numbered, so picks count a group's components in arrays, and
// their free space summed, so a large cluster draws in O(log n). A
// caller placing or repairing many files against one view of the
// cluster builds it once (NewPool); Place and Replace build one a call.
type Pool struct {
	up           []Candidate
	host, rack   []int // per candidate
	hosts, racks int
	index        map[uint32]int // candidate by OSD id
	cum          []float64      // running sum of the candidates' weights
}

func NewPool(up []Candidate) *Pool {
	p := &Pool{up: up, host: make([]int, len(up)), rack: make([]int, len(up)), index: make(map[uint32]int, len(up)), cum: make([]float64, len(up))}
	hosts, racks := map[hostID]int{}, map[string]int{}
	total := 0.0
	for i, c := range up {
		p.index[c.ID] = i
		total += weight(c)
		p.cum[i] = total
		h, ok := hosts[c.hostKey()]
		if !ok {
			h = len(hosts)
			hosts[c.hostKey()] = h
		}
		r, ok := racks[c.Rack]
		if !ok {
			r = len(racks)
			racks[c.Rack] = r
		}
		p.host[i], p.rack[i] = h, r
	}
	p.hosts, p.racks = len(hosts), len(racks)
	return p
}

// spread counts a group's components per host and per rack of a pool:
// a group touches a few domains, so they are listed, not indexed.
type spread struct {
	p     *Pool
	hosts tally
	racks tally
}

// tally counts per domain number, for the few domains a group touches.
type tally struct{ ids, n []int }

func (t *tally) add(id int) {
	for k, x := range t.ids {
		if x == id {
			t.n[k]++
			return
		}
	}
	t.ids, t.n = append(t.ids, id), append(t.n, 1)
}

func (t *tally) of(id int) int {
	for k, x := range t.ids {
		if x == id {
			return t.n[k]
		}
	}
	return 0
}

// min is the fewest any of domains domains holds.
func (t *tally) min(domains int) int {
	if len(t.ids) < domains {
		return 0 // some domain holds none
	}
	return slices.Min(t.n)
}

func (p *Pool) newSpread() spread { return spread{p: p} }

func (s *spread) add(i int) {
	s.hosts.add(s.p.host[i])
	s.racks.add(s.p.rack[i])
}

// fresh reports whether neither candidate i's host nor its rack holds
// any of the group: no pick can do better.
func (s *spread) fresh(i int) bool {
	return s.hosts.of(s.p.host[i]) == 0 && s.racks.of(s.p.rack[i]) == 0
}

// less reports whether a is the better pick than b for the group: its
// host holds fewer of the group, or as few and its rack fewer.
func (s *spread) less(a, b int) bool {
	ha, hb := s.hosts.of(s.p.host[a]), s.hosts.of(s.p.host[b])
	if ha != hb {
		return ha < hb
	}
	return s.racks.of(s.p.rack[a]) < s.racks.of(s.p.rack[b])
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
	return NewPool(up).Place(spec, sizeHint, rng)
}

// Place is Place over the pool's candidates.
func (p *Pool) Place(spec layout.Spec, sizeHint int64, rng *rand.Rand) (layout.Layout, error) {
	l, err := p.place(spec, sizeHint, rng)
	if invariants.Enabled && err == nil {
		invariants.Must(checkPlaced(l, p.up))
	}
	return l, err
}

// place is Place without the invariant check (tests call it to check).
func place(spec layout.Spec, sizeHint int64, up []Candidate, rng *rand.Rand) (layout.Layout, error) {
	return NewPool(up).place(spec, sizeHint, rng)
}

func (p *Pool) place(spec layout.Spec, sizeHint int64, rng *rand.Rand) (layout.Layout, error) {
	up := p.up
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
		sp := p.newSpread()
		for _, i := range pickSpread(p, nil, w, &sp, rng) {
			ids = append(ids, up[i].ID)
		}
	}
	return layout.Layout{Spec: spec, Groups: groups, OSDs: ids, Version: 1}, nil
}

// pickSpread draws n distinct candidates of p (none in exclude) for a
// group whose other components are counted in sp: each pick is, of the
// OSDs whose host and then rack hold the fewest of the group, one drawn
// weighted by free space, so fuller OSDs fill more slowly without ever
// being excluded. Small clusters draw by Efraimidis–Spirakis keys;
// large ones (pickScanMax and more OSDs, where a key per OSD per group
// costs too much) by repeated weighted draws, the same distribution at
// O(log n) a draw. It returns indices into p.up.
func pickSpread(p *Pool, exclude map[int]bool, n int, sp *spread, rng *rand.Rand) []int {
	if len(p.up)-len(exclude) >= pickScanMax {
		return pickSpreadLarge(p, exclude, n, sp, rng)
	}
	// Efraimidis–Spirakis: the key u^(1/w), compared as log(u)/w.
	keys := make([]float64, len(p.up))
	for i, c := range p.up {
		if !exclude[i] {
			keys[i] = math.Log(rng.Float64()) / weight(c)
		}
	}
	out := make([]int, 0, n)
	taken := make([]bool, len(p.up))
	for range n {
		best, bestFresh := -1, -1
		for i := range p.up {
			switch {
			case taken[i] || exclude[i]:
			case sp.fresh(i):
				if bestFresh < 0 || keys[i] > keys[bestFresh] {
					bestFresh = i
				}
			case best < 0 || sp.less(i, best) || !sp.less(best, i) && keys[i] > keys[best]:
				best = i
			}
		}
		if bestFresh >= 0 {
			best = bestFresh // none can do better; the highest key of those
		}
		taken[best] = true
		sp.add(best)
		out = append(out, best)
	}
	return out
}

// pickScanMax is the cluster size from which placement draws by
// weighted sampling instead of a key per OSD.
const pickScanMax = 512

// weight is an OSD's share of draws: its free space (an OSD reporting
// none still gets a tiny one).
func weight(c Candidate) float64 { return float64(max(c.FreeBytes, 1<<20)) }

// pickSpreadLarge draws each pick weighted by free space among the
// candidates not taken or excluded, accepting the first whose host and
// rack hold as few of the group as any host and rack do (the best any
// pick can do); after maxFreshTries draws without one it draws among the
// candidates of the fewest, as pickSpread does.
func pickSpreadLarge(p *Pool, exclude map[int]bool, n int, sp *spread, rng *rand.Rand) []int {
	total := p.cum[len(p.cum)-1]
	draw := func() int {
		return min(sort.SearchFloat64s(p.cum, rng.Float64()*total), len(p.up)-1)
	}
	taken := map[int]bool{}
	out := make([]int, 0, n)
	for range n {
		// The best a pick can do: a host holding as few of the group as
		// any host, in a rack holding as few as any rack (with fewer racks
		// than the group is wide, every rack soon holds one).
		minHost, minRack := sp.hosts.min(p.hosts), sp.racks.min(p.racks)
		pick := -1
		for range maxFreshTries {
			i := draw()
			if !taken[i] && !exclude[i] && sp.hosts.of(p.host[i]) == minHost && sp.racks.of(p.rack[i]) == minRack {
				pick = i
				break
			}
		}
		if pick < 0 {
			pick = drawFewest(p, exclude, taken, sp, rng)
		}
		taken[pick] = true
		sp.add(pick)
		out = append(out, pick)
	}
	return out
}

// maxFreshTries bounds the draws looking for a fresh host and rack.
const maxFreshTries = 64

// drawFewest draws, weighted by free space, among the candidates not
// taken or excluded whose host and then rack hold the fewest of the
// group.
func drawFewest(p *Pool, exclude, taken map[int]bool, sp *spread, rng *rand.Rand) int {
	var best []int
	for i := range p.up {
		if taken[i] || exclude[i] {
			continue
		}
		switch {
		case len(best) == 0 || sp.less(i, best[0]):
			best = append(best[:0], i)
		case !sp.less(best[0], i):
			best = append(best, i)
		}
	}
	total := 0.0
	for _, i := range best {
		total += weight(p.up[i])
	}
	x := rng.Float64() * total
	for _, i := range best {
		if x -= weight(p.up[i]); x < 0 {
			return i
		}
	}
	return best[len(best)-1]
}

// SmallFileSpec is the layout a file known to be small gets instead of its
// coded one: mirrored with the same fault tolerance (Panasas mirrors small
// files; coding a few KiB costs more than it saves).
func SmallFileSpec(s layout.Spec, sizeHint int64) layout.Spec {
	if sizeHint < 0 || sizeHint > layout.SmallFileBytes || s.Scheme == layout.Mirror {
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
	return NewPool(up).Replace(l, move, rng)
}

// Replace is Replace over the pool's candidates.
func (p *Pool) Replace(l layout.Layout, move []int, rng *rand.Rand) ([]uint32, error) {
	out, err := p.replace(l, move, rng)
	if invariants.Enabled && err == nil {
		invariants.Must(checkReplaced(l, move, p.up, out))
	}
	return out, err
}

func (p *Pool) replace(l layout.Layout, move []int, rng *rand.Rand) ([]uint32, error) {
	out := slices.Clone(l.OSDs)
	w := l.Spec.Width()
	for _, c := range move {
		g := c / w
		// Excluded: the OSD it leaves, and every OSD of its group, as it
		// was and as it is becoming (one failure should cost the group at
		// most one component).
		exclude := map[int]bool{}
		for _, id := range append(slices.Clone(l.OSDs[g*w:(g+1)*w]), out[g*w:(g+1)*w]...) {
			if i, ok := p.index[id]; ok {
				exclude[i] = true
			}
		}
		if i, ok := p.index[l.OSDs[c]]; ok {
			exclude[i] = true
		}
		switch {
		case len(exclude) < len(p.up):
			// Spread as a new group would be, counting the group's other
			// components (those on OSDs not up have no domain known here,
			// and count for none).
			sp := p.newSpread()
			for k, id := range out[g*w : (g+1)*w] {
				if i, ok := p.index[id]; ok && g*w+k != c {
					sp.add(i)
				}
			}
			out[c] = p.up[pickSpread(p, exclude, 1, &sp, rng)[0]].ID
		default:
			var shared []Candidate
			for _, cand := range p.up {
				if cand.ID != l.OSDs[c] {
					shared = append(shared, cand)
				}
			}
			if len(shared) == 0 {
				return nil, fmt.Errorf("%w: no up OSD can take component %d", ErrTooFewOSDs, c)
			}
			out[c] = leastShared(out[g*w:(g+1)*w], shared)
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
	hosts, racks := map[hostID]bool{}, map[string]bool{}
	for _, c := range up {
		byID[c.ID] = c
		hosts[c.hostKey()], racks[c.Rack] = true, true
	}
	for g := range l.Groups {
		group := l.OSDs[g*w : (g+1)*w]
		inHost, inRack := map[hostID]bool{}, map[string]bool{}
		for i, id := range group {
			c, ok := byID[id]
			if !ok {
				return fmt.Errorf("OSD %d placed but not a candidate", id)
			}
			if slices.Contains(group[:i], id) {
				return fmt.Errorf("parity group %d holds OSD %d twice: %v", g, id, group)
			}
			if inHost[c.hostKey()] && len(hosts) >= w {
				return fmt.Errorf("parity group %d puts two components in host %v of %d hosts", g, c.hostKey(), len(hosts))
			}
			if inRack[c.Rack] && len(racks) >= w {
				return fmt.Errorf("parity group %d puts two components in rack %q of %d racks", g, c.Rack, len(racks))
			}
			inHost[c.hostKey()], inRack[c.Rack] = true, true
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
