package mds

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func servers(names ...string) []routeServer {
	out := make([]routeServer, len(names))
	for i, n := range names {
		out[i] = routeServer{Name: n, Addr: "addr-" + n}
	}
	return out
}

// checkTable asserts what every planned table must be: every slot served
// by one of alive, each of them within one slot of the others.
func checkTable(t *testing.T, tab *routeTable, alive []routeServer) {
	t.Helper()
	if err := tab.check(); err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{}
	for _, s := range alive {
		live[s.Name] = true
	}
	counts := tab.slotsOf()
	lo, hi := slotCount, 0
	for name := range live {
		lo, hi = min(lo, counts[name]), max(hi, counts[name])
	}
	for name := range counts {
		if !live[name] {
			t.Fatalf("slots served by %s, which is not alive", name)
		}
	}
	if hi-lo > 1 {
		t.Fatalf("slot counts range from %d to %d: %v", lo, hi, counts)
	}
}

func moved(a, b *routeTable) int {
	n := 0
	for slot := range uint32(slotCount) {
		if a.owner(slot).Name != b.owner(slot).Name {
			n++
		}
	}
	return n
}

func TestPlanRoutesJoinAndFailure(t *testing.T) {
	one, changed := planRoutes(nil, servers("a"))
	if !changed || one.Epoch != 1 {
		t.Fatalf("first table: changed %v, epoch %d", changed, one.Epoch)
	}
	checkTable(t, one, servers("a"))
	if again, changed := planRoutes(one, servers("a")); changed || again != one {
		t.Fatal("planning the same processes again changed the table")
	}
	// A join moves only the joiner's share.
	two, _ := planRoutes(one, servers("a", "b"))
	checkTable(t, two, servers("a", "b"))
	if m := moved(one, two); m != slotCount/2 {
		t.Errorf("b joining moved %d slots, want %d", m, slotCount/2)
	}
	three, _ := planRoutes(two, servers("a", "b", "c"))
	checkTable(t, three, servers("a", "b", "c"))
	if m := moved(two, three); m != slotCount/3 && m != slotCount/3+1 {
		t.Errorf("c joining moved %d slots, want about %d", m, slotCount/3)
	}
	// A failure moves only the dead one's slots.
	dead, _ := planRoutes(three, servers("a", "c"))
	checkTable(t, dead, servers("a", "c"))
	if m, had := moved(three, dead), three.slotsOf()["b"]; m != had {
		t.Errorf("b dying moved %d slots; it had %d", m, had)
	}
	if dead.Epoch != three.Epoch+1 {
		t.Errorf("epoch %d after %d", dead.Epoch, three.Epoch)
	}
	gained, lost := slotChanges(three, dead, "a")
	if len(lost) != 0 || len(gained) == 0 {
		t.Errorf("a gained %d and lost %d slots when b died", len(gained), len(lost))
	}
	// Nobody alive: the table stays as it was.
	if same, changed := planRoutes(dead, nil); changed || same != dead {
		t.Error("no process alive changed the table")
	}
	// An address change is a change.
	moved := servers("a", "c")
	moved[0].Addr = "elsewhere"
	next, changed := planRoutes(dead, moved)
	if !changed {
		t.Fatal("a new address of a left the table as it was")
	}
	for slot := range uint32(slotCount) {
		if o := next.owner(slot); o.Name == "a" && o.Addr != "elsewhere" {
			t.Fatalf("slot %d routes to a at %s, its old address", slot, o.Addr)
		}
	}
}

// TestPlanRoutesRandomChurn plans tables for random sets of live
// processes: each is complete and even, and a process alive in both
// keeps every slot it had up to its new quota.
func TestPlanRoutesRandomChurn(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var tab *routeTable
	for step := range 500 {
		var alive []routeServer
		for i := range 9 {
			if rng.IntN(3) > 0 {
				alive = append(alive, servers(fmt.Sprint("m", i))...)
			}
		}
		next, changed := planRoutes(tab, alive)
		if len(alive) == 0 {
			if changed {
				t.Fatalf("step %d (seed %d): no process alive changed the table", step, seed)
			}
			continue
		}
		checkTable(t, next, alive)
		if tab != nil {
			before := tab.slotsOf()
			after := next.slotsOf()
			for _, s := range alive {
				kept := 0
				for slot := range uint32(slotCount) {
					if tab.owner(slot).Name == s.Name && next.owner(slot).Name == s.Name {
						kept++
					}
				}
				if want := min(before[s.Name], after[s.Name]); kept != want {
					t.Fatalf("step %d (seed %d): %s kept %d of its %d slots, now has %d", step, seed, s.Name, kept, before[s.Name], after[s.Name])
				}
			}
		}
		tab = next
	}
}

// A process that read tables skipping one gives every slot it holds the
// gain's grace: a slot held in both may have been another's between them.
func TestSkippedTablesGraceEverySlotHeld(t *testing.T) {
	three, _ := planRoutes(nil, servers("a", "b", "c"))
	dead, _ := planRoutes(three, servers("a", "c")) // b's slots to a and c
	back, _ := planRoutes(dead, servers("a", "b", "c"))
	gained, _ := slotChanges(three, dead, "a")
	if got := graceAfterSkips(three, dead, "a", gained); len(got) != len(gained) {
		t.Fatalf("the next table: %d slots wait, want the %d gained", len(got), len(gained))
	}
	held := back.slotsOf()["b"]
	gained, _ = slotChanges(three, back, "b") // b read three, then back
	if got := graceAfterSkips(three, back, "b", gained); len(got) != held {
		t.Fatalf("b skipped a table: %d slots wait, want all %d it holds", len(got), held)
	}
}
