package route

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives Plan through testdata's transcripts:
//
//	plan as=NAME [from=NAME] alive=a,b[@addr],...   a new table from the named one (none: nil)
//	changes from=NAME to=NAME name=S                 what S gains and loses
//	grace from=NAME to=NAME name=S                   slots that wait a grace at S
//	owner table=NAME slot=N
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		tables := map[string]*Table{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) string { return transcript.Str(t, d, key) }
			table := func(key string) *Table {
				if !d.HasArg(key) {
					return nil
				}
				tab, ok := tables[arg(key)]
				if !ok {
					d.Fatalf(t, "no table %s", arg(key))
				}
				return tab
			}
			switch d.Cmd {
			case "plan":
				old := table("from")
				var alive []Server
				if d.HasArg("alive") {
					for _, a := range strings.Split(arg("alive"), ",") {
						name, addr, ok := strings.Cut(a, "@")
						if !ok {
							addr = "addr-" + name
						}
						alive = append(alive, Server{Name: name, Addr: addr})
					}
				}
				next, changed := Plan(old, alive)
				tables[arg("as")] = next
				return describe(old, next, changed)
			case "changes":
				gained, lost := Changes(table("from"), table("to"), arg("name"))
				return fmt.Sprintf("gained %d, lost %d", len(gained), len(lost))
			case "grace":
				from, to := table("from"), table("to")
				gained, _ := Changes(from, to, arg("name"))
				return fmt.Sprintf("%d slots wait (%d gained)", len(GraceAfterSkips(from, to, arg("name"), gained)), len(gained))
			case "owner":
				slot, err := strconv.Atoi(arg("slot"))
				if err != nil {
					d.Fatalf(t, "slot: %v", err)
				}
				o := table("table").Owner(uint32(slot))
				return o.Name + " at " + o.Addr
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// describe is a table as a transcript shows it: its epoch, whether it
// changed, each server's slots and how many slots changed owner.
func describe(old, next *Table, changed bool) string {
	if next == nil {
		return "no table"
	}
	counts := next.SlotsOf()
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range counts {
			if !yield(n) {
				return
			}
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d changed=%v slots", next.Epoch, changed)
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%d", n, counts[n])
	}
	if old != nil {
		moved := 0
		for slot := range uint32(SlotCount) {
			if old.Owner(slot).Name != next.Owner(slot).Name {
				moved++
			}
		}
		fmt.Fprintf(&b, " moved=%d", moved)
	}
	return b.String()
}

// TestPlanRandomChurn plans tables for random sets of live processes;
// checkPlan (run here whatever the build) holds for every one.
func TestPlanRandomChurn(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	var tab *Table
	for step := range 500 {
		var alive []Server
		for i := range 9 {
			if rng.IntN(3) > 0 {
				alive = append(alive, Server{Name: fmt.Sprint("m", i), Addr: "x"})
			}
		}
		next, changed := plan(tab, alive)
		if err := checkPlan(tab, alive, next, changed); err != nil {
			t.Fatalf("step %d (seed %d): %v", step, seed, err)
		}
		tab = next
	}
}

// TestDirSlotSwitching: a draw below the probability sends a new
// directory to the slot its parent and name hash to, one above keeps it
// in its parent's; the hashed slots spread over all of them.
func TestDirSlotSwitching(t *testing.T) {
	const n, parent = 20000, 1
	seen := map[uint32]bool{}
	for i := range n {
		u := float64(i) / n // evenly over [0, 1)
		name := fmt.Sprint("d", i)
		slot := NewDirSlot(parent, name, 0.25, u)
		hashed := NewDirSlot(parent, name, 1, 0)
		switch {
		case u >= 0.25 && slot != SlotOf(parent):
			t.Fatalf("draw %v above the probability moved %s to slot %d", u, name, slot)
		case u < 0.25 && slot != hashed:
			t.Fatalf("draw %v below the probability left %s in slot %d, not its hashed %d", u, name, slot, hashed)
		}
		seen[hashed] = true
	}
	if len(seen) < SlotCount*9/10 {
		t.Errorf("hashed directories went to %d slots of %d", len(seen), SlotCount)
	}
	if NewDirSlot(parent, "x", 0, 0) != SlotOf(parent) {
		t.Error("a probability of 0 switched")
	}
	if _, err := InoInSlot(MaxInoHigh+1, 0); err == nil {
		t.Error("a counter past the slot bits gave an inode number")
	}
}

// TestCheckPlanCatches: the invariant check refuses what a wrong plan
// would return, so it is not a check that cannot fail.
func TestCheckPlanCatches(t *testing.T) {
	alive := []Server{{Name: "a"}, {Name: "b"}}
	one, _ := plan(nil, alive)
	lopsided := *one
	lopsided.Owners = slices.Clone(one.Owners)
	for i := range lopsided.Owners {
		lopsided.Owners[i] = 0
	}
	lopsided.Epoch = 2
	if err := checkPlan(one, alive, &lopsided, true); err == nil {
		t.Error("every slot on one of two servers passed")
	}
	dead, _ := plan(one, alive[:1])
	if err := checkPlan(one, alive, dead, true); err == nil {
		t.Error("a table without b, with b alive, passed")
	}
	same := *one
	same.Epoch = 5
	if err := checkPlan(one, alive, &same, true); err == nil {
		t.Error("an epoch jump passed")
	}
}
