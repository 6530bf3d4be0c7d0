package repair

import (
	"fmt"
	"slices"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/invariants"
)

// Rebalancing (Panasas's and Ceph's background rebalance): the leader
// keeps an estimate of the bytes of components each OSD holds, computed
// from the layouts; when the fullest up OSD holds more than the emptiest
// by over the slack (Target), an idle worker is handed a healthy file
// with a component on the fullest (PickMove) and moves that component to
// the emptiest, copied, not decoded. Repairs always go first.

// Move is one component a rebalance moves to an emptier OSD.
type Move struct {
	Comp     int
	From, To uint32
	Bytes    int64
}

// Target picks the fullest and emptiest up, non-draining OSDs by est
// (component bytes per OSD) and how far apart they are; ok is false when
// the cluster is balanced within slack (or a tenth of the mean). Ties go
// to the lower id.
func Target(est map[uint32]int64, views map[uint32]cluster.View, slackBytes int64) (hi, lo uint32, diff int64, ok bool) {
	first := true
	var total int64
	n := 0
	for id, v := range views { // ties go to the lower id, so the walk's order does not matter
		if v.State != cluster.StateUp || v.Drain {
			continue
		}
		b := est[id]
		total += b
		n++
		if first || b > est[hi] || b == est[hi] && id < hi {
			hi = id
		}
		if first || b < est[lo] || b == est[lo] && id < lo {
			lo = id
		}
		first = false
	}
	if n < 2 {
		return 0, 0, 0, false
	}
	diff = est[hi] - est[lo]
	return hi, lo, diff, diff > max(slackBytes, total/int64(n)/10)
}

// PickMove chooses the component of a file (placed on osds, parity
// groups width wide; compBytes estimates each component's data) to move
// from hi to lo: the first on hi holding data and less than diff whose
// group lo is not already in. Any move of less than the difference
// narrows it (the sum of squares of the OSDs' bytes falls), so moves end.
func PickMove(osds []uint32, width int, compBytes func(c int) int64, hi, lo uint32, diff int64) (Move, bool) {
	for c, id := range osds {
		if id != hi {
			continue
		}
		n := compBytes(c)
		m := Move{Comp: c, From: hi, To: lo, Bytes: n}
		if n > 0 && n < diff && m.Apply(osds, width) != nil {
			return m, true
		}
	}
	return Move{}, false
}

// Apply is osds with the move made, or nil when it no longer applies
// (the component left From, or To holds another of its group).
func (m *Move) Apply(osds []uint32, width int) []uint32 {
	if m.Comp >= len(osds) || osds[m.Comp] != m.From {
		return nil
	}
	g := m.Comp / width
	if slices.Contains(osds[g*width:(g+1)*width], m.To) {
		return nil
	}
	out := slices.Clone(osds)
	out[m.Comp] = m.To
	if invariants.Enabled {
		invariants.Must(checkApplied(osds, out, m, width))
	}
	return out
}

// checkApplied: exactly the moved component changed, and its group
// still holds no OSD twice if it held none before.
func checkApplied(before, after []uint32, m *Move, width int) error {
	for c := range before {
		if (before[c] != after[c]) != (c == m.Comp) {
			return fmt.Errorf("move of component %d changed component %d", m.Comp, c)
		}
	}
	g := m.Comp / width
	group := after[g*width : (g+1)*width]
	for i, id := range group {
		if id == m.To && slices.Contains(group[:i], id) {
			return fmt.Errorf("move put OSD %d twice in group %d", id, g)
		}
	}
	return nil
}
