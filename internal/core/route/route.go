package route

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/braidfs/braid/internal/invariants"
)

const (
	// SlotBits is how many low bits of an inode number are its slot.
	SlotBits = 8
	// SlotCount is the number of slots.
	SlotCount = 1 << SlotBits
	// SlotMask takes an inode number's slot.
	SlotMask = SlotCount - 1
	// MaxInoHigh bounds the inode counter: past it, n<<SlotBits wraps.
	MaxInoHigh = 1<<(64-SlotBits) - 1
	// TableV is the stored table's schema version.
	TableV = 1
	// MaxServers bounds the processes a table names (and so its size,
	// about 30 bytes each beside 2 bytes a slot).
	MaxServers = 1024
)

// SlotOf is the slot inode ino belongs to.
func SlotOf(ino uint64) uint32 { return uint32(ino & SlotMask) }

// InoInSlot is the inode number counter value n gives in slot.
func InoInSlot(n uint64, slot uint32) (uint64, error) {
	if n > MaxInoHigh {
		return 0, fmt.Errorf("inode counter at %d: no inode numbers left", n)
	}
	return n<<SlotBits | uint64(slot&SlotMask), nil
}

// NewDirSlot is the slot of a new directory name in directory parent:
// its parent's, or with probability switchProb (a draw u in [0,1)) the
// hash of parent and name. Hashing rather than drawing a slot keeps a
// replayed or retried mkdir, and the simulation, deterministic.
func NewDirSlot(parent uint64, name string, switchProb, u float64) uint32 {
	if switchProb <= 0 || u >= switchProb {
		return SlotOf(parent)
	}
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(parent >> (8 * i))
	}
	h.Write(b[:])
	h.Write([]byte(name))
	return uint32(h.Sum64() & SlotMask)
}

// Server is one MDS process of the table: its name (unique in the
// cluster, fixed for its life) and the address clients reach it at.
type Server struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
}

// Table is the stored table. Owners[slot] indexes Servers.
type Table struct {
	V       int      `json:"v"`     // schema version (TableV)
	Epoch   uint64   `json:"epoch"` // raised by every change
	Servers []Server `json:"servers"`
	Owners  []uint16 `json:"owners"` // SlotCount of them
}

// Check reports a table that does not decode to something servable.
func (t *Table) Check() error {
	if t.V != TableV {
		return fmt.Errorf("routing table version %d, this MDS reads %d", t.V, TableV)
	}
	if len(t.Owners) != SlotCount {
		return fmt.Errorf("routing table has %d slots, want %d", len(t.Owners), SlotCount)
	}
	if len(t.Servers) == 0 || len(t.Servers) > MaxServers {
		return fmt.Errorf("routing table names %d servers", len(t.Servers))
	}
	for _, o := range t.Owners {
		if int(o) >= len(t.Servers) {
			return fmt.Errorf("routing table slot owner %d of %d servers", o, len(t.Servers))
		}
	}
	return nil
}

// Owner is the server that serves slot.
func (t *Table) Owner(slot uint32) Server { return t.Servers[t.Owners[slot&SlotMask]] }

// SlotsOf counts the slots each server name serves.
func (t *Table) SlotsOf() map[string]int {
	n := map[string]int{}
	for _, o := range t.Owners {
		n[t.Servers[o].Name]++
	}
	return n
}

// Plan is the table for the processes alive, from old (nil: none yet).
// changed is false when old already is that table; next then is old
// itself.
func Plan(old *Table, alive []Server) (next *Table, changed bool) {
	next, changed = plan(old, alive)
	if invariants.Enabled {
		invariants.Must(checkPlan(old, alive, next, changed))
	}
	return next, changed
}

func plan(old *Table, alive []Server) (next *Table, changed bool) {
	if len(alive) == 0 {
		return old, false // nobody to give slots to: leave them where they were
	}
	alive = liveSet(alive)
	owner, count := keptOwners(old, alive)
	quota := quotas(alive, count)
	// Over quota: give back the highest slots.
	for slot := SlotCount - 1; slot >= 0; slot-- {
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
	next = &Table{V: TableV, Servers: alive, Owners: make([]uint16, SlotCount)}
	for slot, i := range owner {
		next.Owners[slot] = uint16(i)
	}
	if old != nil && Same(old, next) {
		return old, false
	}
	if old != nil {
		next.Epoch = old.Epoch
	}
	next.Epoch++
	return next, true
}

// liveSet is alive sorted by name, each name once, at most MaxServers.
func liveSet(alive []Server) []Server {
	alive = slices.Clone(alive)
	slices.SortFunc(alive, func(a, b Server) int { return strings.Compare(a.Name, b.Name) })
	alive = slices.CompactFunc(alive, func(a, b Server) bool { return a.Name == b.Name })
	if len(alive) > MaxServers {
		alive = alive[:MaxServers]
	}
	return alive
}

// keptOwners is, per slot, the index in alive of its owner in old if
// that one is alive (else -1), and how many slots each keeps.
func keptOwners(old *Table, alive []Server) (owner, count []int) {
	index := map[string]int{}
	for i, s := range alive {
		index[s.Name] = i
	}
	owner = make([]int, SlotCount)
	count = make([]int, len(alive))
	for slot := range owner {
		owner[slot] = -1
		if old != nil {
			if i, ok := index[old.Owner(uint32(slot)).Name]; ok {
				owner[slot] = i
				count[i]++
			}
		}
	}
	return owner, count
}

// quotas gives every server floor(slots/n), and the rem with the most
// slots already one more, so that evening out moves the fewest.
func quotas(alive []Server, count []int) []int {
	floor, rem := SlotCount/len(alive), SlotCount%len(alive)
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
	return quota
}

// Same reports whether a and b send every slot to the same server at the
// same address.
func Same(a, b *Table) bool {
	for slot := range uint32(SlotCount) {
		if a.Owner(slot) != b.Owner(slot) {
			return false
		}
	}
	return len(a.Servers) == len(b.Servers)
}

// Changes compares the table a process served by (old, nil: none) with
// the next: the slots name gains, and the slots it loses.
func Changes(old, next *Table, name string) (gained, lost []uint32) {
	for slot := range uint32(SlotCount) {
		was := old != nil && old.Owner(slot).Name == name
		is := next.Owner(slot).Name == name
		switch {
		case is && !was:
			gained = append(gained, slot)
		case was && !is:
			lost = append(lost, slot)
		}
	}
	return gained, lost
}

// GraceAfterSkips is the slots that wait a gain's grace as the table
// went from was to next: those gained, or, if tables were skipped here,
// every slot held in next, since one held in both may have been another
// process's between them (B -> C -> B) and granted there.
func GraceAfterSkips(was, next *Table, name string, gained []uint32) []uint32 {
	if was != nil && next.Epoch > was.Epoch+1 {
		all, _ := Changes(nil, next, name)
		return all
	}
	return gained
}

// checkPlan is what every table Plan returns must be: servable, every
// slot served by a process alive, the counts within one of each other,
// a process alive in both keeping every slot it had up to its new count,
// and the epoch raised exactly when the table changed.
func checkPlan(old *Table, alive []Server, next *Table, changed bool) error {
	if len(alive) == 0 {
		if changed || next != old {
			return fmt.Errorf("no process alive, yet the table changed")
		}
		return nil
	}
	if err := next.Check(); err != nil {
		return err
	}
	live := map[string]bool{}
	for _, s := range liveSet(alive) {
		live[s.Name] = true
	}
	counts := next.SlotsOf()
	lo, hi := SlotCount, 0
	for name := range live {
		lo, hi = min(lo, counts[name]), max(hi, counts[name])
	}
	if hi-lo > 1 {
		return fmt.Errorf("slot counts range from %d to %d", lo, hi)
	}
	for name := range counts {
		if !live[name] {
			return fmt.Errorf("slots served by %s, which is not alive", name)
		}
	}
	if old == nil {
		return nil
	}
	if changed != (next != old) || (changed && next.Epoch != old.Epoch+1) {
		return fmt.Errorf("changed %v with epoch %d after %d", changed, next.Epoch, old.Epoch)
	}
	before := old.SlotsOf()
	for name := range live {
		kept := 0
		for slot := range uint32(SlotCount) {
			if old.Owner(slot).Name == name && next.Owner(slot).Name == name {
				kept++
			}
		}
		if want := min(before[name], counts[name]); kept != want {
			return fmt.Errorf("%s kept %d of its %d slots, now has %d", name, kept, before[name], counts[name])
		}
	}
	return nil
}
