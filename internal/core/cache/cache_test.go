package cache

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives the table through testdata's transcripts:
//
//	wait session=S [epoch=current|N] [acked=N]   a CacheWait
//	begin as=G                                   a reader notes the change counter
//	grant session=S gen=G inos=I,...             (epoch: the session's current one)
//	change as=C [requester=S] [noselfwait]
//	cover change=C touched=I[:deleted][:entries=N],...
//	pending change=C
//	evict-laggards change=C
//	end change=C
//	claim session=S gen=G dir=D id=N
//	load-claim dir=D holder=S id=N
//	recall-claim dir=D
//	end-claim dir=D id=N
//	overdue
//	expire
//	grace [extra=D]
//	tick d=D
//	effects                                      what the decisions since woke
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		start := time.Unix(1_000_000, 0)
		now := start
		tab := New(4*time.Second, 1)
		epochs := map[uint64]uint64{}
		gens := map[string]uint64{}
		changes := map[string]*Change{}
		var pending []string
		since := func(at time.Time) string { return "+" + at.Sub(start).String() }
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			defer func() {
				e := tab.TakeEffects()
				for _, id := range e.Woken {
					pending = append(pending, fmt.Sprintf("woke session=%d", id))
				}
				for _, id := range e.Acked {
					pending = append(pending, fmt.Sprintf("acks of session=%d", id))
				}
				for _, dir := range e.ClaimsEnded {
					pending = append(pending, fmt.Sprintf("claim ended dir=%d", dir))
				}
				if err := tab.check(); err != nil {
					t.Fatalf("%s: invariant: %v", d.Pos, err)
				}
			}()
			str := func(key string) string { return transcript.Str(t, d, key) }
			num := func(key string) uint64 { return uint64(transcript.Int(t, d, key)) }
			dur := func(key string) time.Duration { return transcript.Dur(t, d, key) }
			change := func() *Change {
				c := changes[str("change")]
				if c == nil {
					d.Fatalf(t, "no change %s", str("change"))
				}
				return c
			}
			switch d.Cmd {
			case "wait":
				id := num("session")
				epoch := epochs[id]
				if e := str("epoch"); e != "" && e != "current" {
					epoch = num("epoch")
				}
				var acked uint64
				if d.HasArg("acked") {
					acked = num("acked")
				}
				e, invs, ok := tab.Wait(now, id, epoch, acked)
				if !ok {
					return "full"
				}
				note := ""
				if e != epochs[id] {
					note = " (new)"
				}
				epochs[id] = e
				return fmt.Sprintf("epoch %d%s queued %s", e&0xffffffff, note, invText(invs))
			case "begin":
				gens[str("as")] = tab.Begin()
				return fmt.Sprintf("gen %d", gens[str("as")])
			case "grant":
				var inos []uint64
				for _, f := range strings.Split(str("inos"), ",") {
					n, _ := strconv.ParseUint(f, 10, 64)
					inos = append(inos, n)
				}
				id := num("session")
				seq, ok := tab.Grant(now, id, epochs[id], gens[str("gen")], inos...)
				if !ok {
					return "refused"
				}
				return fmt.Sprintf("granted seq=%d", seq)
			case "change":
				var req uint64
				if d.HasArg("requester") {
					req = num("requester")
				}
				changes[str("as")] = NewChange(req, d.HasArg("noselfwait"))
				return "ok"
			case "cover":
				touched := map[uint64]Touched{}
				for _, f := range strings.Split(str("touched"), ",") {
					parts := strings.Split(f, ":")
					ino, _ := strconv.ParseUint(parts[0], 10, 64)
					tc := Touched{Written: true}
					for _, p := range parts[1:] {
						switch {
						case p == "deleted":
							tc = Touched{Deleted: true}
						case strings.HasPrefix(p, "entries="):
							tc.Entries, _ = strconv.Atoi(strings.TrimPrefix(p, "entries="))
						}
					}
					touched[ino] = tc
				}
				c := change()
				wait, grace := tab.Cover(now, c, touched)
				out := fmt.Sprintf("must-wait=%v in-grace=%v", wait, grace)
				if !wait && !grace && len(c.Self) > 0 {
					out += fmt.Sprintf("\nself %v seq=%d", slices.Sorted(maps.Keys(c.Self)), c.SelfSeq)
					if len(c.Kept) > 0 {
						out += fmt.Sprintf(" kept %v", c.Kept)
					}
				}
				return out
			case "pending":
				s, end, waiting := tab.Pending(now, change())
				switch {
				case !waiting:
					return "nothing pending"
				case s == 0:
					return "waits for an evicted session's lease, until " + since(end)
				}
				return fmt.Sprintf("waits for session=%d", s)
			case "evict-laggards":
				tab.EvictLaggards(change())
				return "ok"
			case "end":
				tab.End(change())
				return "ok"
			case "claim":
				id := num("session")
				if tab.GrantClaim(now, id, epochs[id], gens[str("gen")], num("dir"), num("id")) {
					return "claimed"
				}
				return "refused"
			case "load-claim":
				tab.LoadClaim(now, num("dir"), num("holder"), num("id"))
				return "ok"
			case "recall-claim":
				deadline, id, ok := tab.RecallClaim(now, num("dir"))
				if !ok {
					return "not claimed"
				}
				return fmt.Sprintf("claim %d, until %s", id, since(deadline))
			case "end-claim":
				tab.EndClaim(num("dir"), num("id"))
				return "ok"
			case "overdue":
				o := tab.Overdue(now)
				if len(o) == 0 {
					return "none"
				}
				var out []string
				for _, dir := range slices.Sorted(maps.Keys(o)) {
					out = append(out, fmt.Sprintf("dir=%d claim=%d", dir, o[dir]))
				}
				return strings.Join(out, "\n")
			case "expire":
				idle := tab.Expire(now)
				n, reg := tab.Stats()
				return fmt.Sprintf("idle=%v sessions=%d registered=%d", idle, n, reg)
			case "grace":
				var extra time.Duration
				if d.HasArg("extra") {
					extra = dur("extra")
				}
				tab.Grace(now, extra)
				return "grace until " + since(tab.GraceEnd())
			case "tick":
				now = now.Add(dur("d"))
				return "now " + since(now)
			case "effects":
				out := strings.Join(pending, "\n")
				pending = nil
				if out == "" {
					return "none"
				}
				return out
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func invText(invs []Invalidation) string {
	if len(invs) == 0 {
		return "[]"
	}
	var out []string
	for _, inv := range invs {
		s := fmt.Sprintf("%d:%d", inv.Seq, inv.Ino)
		if inv.Self {
			s += "(self)"
		}
		if inv.Claim {
			s += "(claim)"
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// TestCheckCatches: the invariant check refuses a table a wrong decision
// would leave.
func TestCheckCatches(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := New(4*time.Second, 1)
	e, _, _ := tab.Wait(now, 7, 0, 0)
	if _, ok := tab.Grant(now, 7, e, tab.Begin(), 42); !ok {
		t.Fatal("grant refused")
	}
	if err := tab.check(); err != nil {
		t.Fatal(err)
	}
	delete(tab.holders, 42) // the index loses a registration
	if tab.check() == nil {
		t.Error("a registration missing from the holders passed")
	}
}
