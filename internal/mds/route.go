package mds

import (
	"fmt"
	"slices"
	"strings"
)

// The routing table: which MDS process serves each slot (slots.go), as
// Slice's directory service maps logical servers to machines. It lives
// in the engine under keyRoute, written only by the elected leader, in
// transactions guarded by its lead; every other MDS process reads it,
// serves the slots it names it for, and commits only while the table is
// as it read it (kv.WithExpect on keyRouteEpoch), so a process whose
// slots moved cannot change their inodes after the move.
//
// planRoutes decides the table from the previous one and the processes
// alive (their records in the engine, held by their sessions' leases):
// it keeps every slot whose owner is alive where it is, gives the slots
// of the dead to the living with fewest, and then evens out the counts
// to within one, moving as few slots as it can. The caller does the I/O.

// routeServer is one MDS process of the table: its name (unique in the
// cluster, fixed for its life) and the address clients reach it at.
type routeServer struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// routeTable is the stored table. Owners[slot] indexes Servers.
type routeTable struct {
	V       int           `json:"v"`     // schema version (1)
	Epoch   uint64        `json:"epoch"` // raised by every change
	Servers []routeServer `json:"servers"`
	Owners  []uint16      `json:"owners"` // slotCount of them
}

const routeTableV = 1

// maxRouteServers bounds the processes a table names (and so its size,
// about 30 bytes each beside 2 bytes a slot).
const maxRouteServers = 1024

// check reports a table that does not decode to something servable.
func (t *routeTable) check() error {
	if t.V != routeTableV {
		return fmt.Errorf("routing table version %d, this MDS reads %d", t.V, routeTableV)
	}
	if len(t.Owners) != slotCount {
		return fmt.Errorf("routing table has %d slots, want %d", len(t.Owners), slotCount)
	}
	if len(t.Servers) == 0 || len(t.Servers) > maxRouteServers {
		return fmt.Errorf("routing table names %d servers", len(t.Servers))
	}
	for _, o := range t.Owners {
		if int(o) >= len(t.Servers) {
			return fmt.Errorf("routing table slot owner %d of %d servers", o, len(t.Servers))
		}
	}
	return nil
}

// owner is the server that serves slot.
func (t *routeTable) owner(slot uint32) routeServer { return t.Servers[t.Owners[slot&slotMask]] }

// slotsOf counts the slots each server name serves.
func (t *routeTable) slotsOf() map[string]int {
	n := map[string]int{}
	for _, o := range t.Owners {
		n[t.Servers[o].Name]++
	}
	return n
}

// planRoutes is the table for the processes alive, from old (nil: none
// yet). changed is false when old already is that table; the new one
// then is old itself.
func planRoutes(old *routeTable, alive []routeServer) (next *routeTable, changed bool) {
	if len(alive) == 0 {
		return old, false // nobody to give slots to: leave them where they were
	}
	alive = slices.Clone(alive)
	slices.SortFunc(alive, func(a, b routeServer) int { return strings.Compare(a.Name, b.Name) })
	alive = slices.CompactFunc(alive, func(a, b routeServer) bool { return a.Name == b.Name })
	if len(alive) > maxRouteServers {
		alive = alive[:maxRouteServers]
	}
	index := map[string]int{}
	for i, s := range alive {
		index[s.Name] = i
	}
	// owner[slot] is an index into alive, or -1 while unassigned.
	owner := make([]int, slotCount)
	count := make([]int, len(alive))
	for slot := range owner {
		owner[slot] = -1
		if old != nil {
			if i, ok := index[old.owner(uint32(slot)).Name]; ok {
				owner[slot] = i
				count[i]++
			}
		}
	}
	// Quotas: every server floor(slots/n), and the rem with the most
	// slots already one more, so that evening out moves the fewest.
	floor, rem := slotCount/len(alive), slotCount%len(alive)
	order := make([]int, len(alive))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return count[b] - count[a] })
	quota := make([]int, len(alive))
	for k, i := range order {
		quota[i] = floor
		if k < rem {
			quota[i]++
		}
	}
	// Over quota: give back the highest slots.
	for slot := slotCount - 1; slot >= 0; slot-- {
		if i := owner[slot]; i >= 0 && count[i] > quota[i] {
			owner[slot] = -1
			count[i]--
		}
	}
	// Unassigned: to the server furthest under its quota.
	for slot := range owner {
		if owner[slot] >= 0 {
			continue
		}
		best := 0
		for i := range alive {
			if quota[i]-count[i] > quota[best]-count[best] {
				best = i
			}
		}
		owner[slot] = best
		count[best]++
	}
	next = &routeTable{V: routeTableV, Servers: alive, Owners: make([]uint16, slotCount)}
	for slot, i := range owner {
		next.Owners[slot] = uint16(i)
	}
	if old != nil && sameRoutes(old, next) {
		return old, false
	}
	if old != nil {
		next.Epoch = old.Epoch
	}
	next.Epoch++
	return next, true
}

// sameRoutes reports whether a and b send every slot to the same server
// at the same address.
func sameRoutes(a, b *routeTable) bool {
	for slot := range uint32(slotCount) {
		if a.owner(slot) != b.owner(slot) {
			return false
		}
	}
	return len(a.Servers) == len(b.Servers)
}

// slotChanges compares the table a process served by (old, nil: none)
// with the next: the slots name gains, and the slots it loses.
func slotChanges(old, next *routeTable, name string) (gained, lost []uint32) {
	for slot := range uint32(slotCount) {
		was := old != nil && old.owner(slot).Name == name
		is := next.owner(slot).Name == name
		switch {
		case is && !was:
			gained = append(gained, slot)
		case was && !is:
			lost = append(lost, slot)
		}
	}
	return gained, lost
}
