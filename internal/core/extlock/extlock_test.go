package extlock

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives the extent lock table through the
// transcripts in testdata (events, and the decision each one
// must get), as etcd's raft package tests its state machine. Commands:
//
//	acquire session=S handle=H lo=L hi=H|max [ino=I] [norecall]
//	release handle=H lo=L hi=H|max [seq=S] [end=E] [gen=G] [ino=I]
//	                    (seq: the newest grant the holder had seen; all if absent)
//	drop handle=H [ino=I]
//	truncated gen=G [ino=I]
//	committed size=N gen=G [ino=I]
//	reclaim session=S handle=H spans=L-H,L-H end=E [gen=G] [ino=I]
//	wait session=S      (a LockWait: its recalls, or that it waits)
//	tick d=DURATION     (the clock moves on)
//	restart             (a new process, which found the locks-held mark)
//	gain slot=N extra=DURATION (the slot came from another process; inode I is in slot I)
//	locks [ino=I]
//	empty
//	effects             (what the decisions since the last effects woke)
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		start := time.Unix(1_000_000, 0)
		now := start
		const lease = 4 * time.Second
		slotOf := func(ino uint64) uint32 { return uint32(ino) } // inode I is in slot I
		tab := New(lease, now, slotOf)
		var pending []string
		since := func(at time.Time) string { return "+" + at.Sub(start).String() }
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			defer func() {
				e := tab.TakeEffects()
				for _, ino := range e.Released {
					pending = append(pending, fmt.Sprintf("released ino=%d", ino))
				}
				for _, id := range e.Woken {
					pending = append(pending, fmt.Sprintf("woke session=%d", id))
				}
			}()
			arg := func(key string, def int64) int64 {
				for _, a := range d.CmdArgs {
					if a.Key == key {
						if a.Vals[0] == "max" {
							return MaxStripe
						}
						v, err := strconv.ParseInt(a.Vals[0], 10, 64)
						if err != nil {
							d.Fatalf(t, "%s: %v", key, err)
						}
						return v
					}
				}
				if def < 0 {
					d.Fatalf(t, "%s: missing", key)
				}
				return def
			}
			ino := uint64(arg("ino", 1))
			switch d.Cmd {
			case "acquire":
				r := tab.Acquire(now, ino, uint64(arg("session", -1)), uint64(arg("handle", -1)),
					Span{arg("lo", -1), arg("hi", -1)}, true, !d.HasArg("norecall"))
				switch {
				case r.Granted:
					return fmt.Sprintf("granted %s seq=%d end=%d gen=%d epoch=%d", r.Grant, r.Seq, r.End, r.EndGen, r.Epoch)
				case r.Full:
					return "full"
				case !r.Until.IsZero():
					return "wait until " + since(r.Until)
				}
				return "wait"
			case "release":
				seq := uint64(math.MaxUint64)
				if d.HasArg("seq") {
					seq = uint64(arg("seq", -1))
				}
				tab.Release(ino, uint64(arg("handle", -1)), Span{arg("lo", -1), arg("hi", -1)}, seq, arg("end", 0), uint64(arg("gen", 0)))
				return "ok"
			case "drop":
				tab.DropHandle(ino, uint64(arg("handle", -1)))
				return "ok"
			case "reclaim":
				var text string
				d.ScanArgs(t, "spans", &text)
				var spans []Span
				for _, p := range strings.Split(text, ",") {
					lo, hi, _ := strings.Cut(p, "-")
					l, err1 := strconv.ParseInt(lo, 10, 64)
					h, err2 := strconv.ParseInt(hi, 10, 64)
					if hi == "max" {
						h, err2 = MaxStripe, nil
					}
					if err1 != nil || err2 != nil {
						d.Fatalf(t, "spans %q", text)
					}
					spans = append(spans, Span{l, h})
				}
				seq, epoch, err := tab.Reclaim(now, ino, uint64(arg("session", -1)), uint64(arg("handle", -1)), spans, arg("end", 0), uint64(arg("gen", 0)))
				if err != nil {
					return "refused: " + err.Error()
				}
				return fmt.Sprintf("reclaimed seq=%d epoch=%d", seq, epoch)
			case "committed":
				tab.Committed(ino, arg("size", -1), uint64(arg("gen", -1)))
				return "ok"
			case "truncated":
				tab.Truncated(ino, uint64(arg("gen", -1)))
				return "ok"
			case "wait":
				a, wait, err := tab.Wait(now, uint64(arg("session", -1)))
				if err != nil {
					return "error: " + err.Error()
				}
				if wait {
					a = tab.Waited(now, uint64(arg("session", -1)))
					out := fmt.Sprintf("nothing recalled epoch=%d", a.Epoch)
					for _, ino := range a.Moved {
						out += fmt.Sprintf("\nmoved again ino=%d", ino)
					}
					return out
				}
				out := []string{fmt.Sprintf("epoch=%d", a.Epoch)}
				for _, r := range a.Recalls {
					out = append(out, fmt.Sprintf("recall ino=%d handle=%d %s seq=%d", r.Ino, r.Handle, Span{r.Lo, r.Hi}, r.Seq))
				}
				for _, ino := range a.Moved {
					out = append(out, fmt.Sprintf("moved ino=%d", ino))
				}
				return strings.Join(out, "\n")
			case "moveaway":
				// The inode's slot moved to another process.
				tab.DropInos(now, func(i uint64) bool { return i == ino })
				return "ok"
			case "tick":
				var s string
				d.ScanArgs(t, "d", &s)
				dur, err := time.ParseDuration(s)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				now = now.Add(dur)
				return "now " + since(now)
			case "restart":
				tab = New(lease, now, slotOf)
				tab.Grace(now, 0)
				return "grace until " + since(now.Add(lease))
			case "gain":
				var e string
				d.ScanArgs(t, "extra", &e)
				extra, err := time.ParseDuration(e)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				slot := uint32(arg("slot", -1))
				tab.GraceSlots(now, []uint32{slot}, extra)
				return "grace of slot until " + since(tab.SlotGraceEnd(slot))
			case "locks":
				ls := tab.Held(ino)
				slices.SortFunc(ls, func(a, b Lock) int {
					return int(min(max(a.Lo-b.Lo, -1), 1))
				})
				if len(ls) == 0 {
					return "none"
				}
				var out []string
				for _, l := range ls {
					out = append(out, fmt.Sprintf("session=%d handle=%d %s seq=%d", l.Session, l.Handle, l.Span, l.Seq))
				}
				return strings.Join(out, "\n")
			case "empty":
				empty, at := tab.Empty(now)
				if !empty {
					return "held"
				}
				return "empty since " + since(at)
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

// TestCheckCatches: the invariant check refuses a table a wrong decision
// would leave, so it is not a check that cannot fail.
func TestCheckCatches(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := New(4*time.Second, now, func(ino uint64) uint32 { return uint32(ino) })
	if r := tab.Acquire(now, 1, 1, 10, Span{0, 4}, false, true); !r.Granted {
		t.Fatal("first acquire not granted")
	}
	if err := tab.check(); err != nil {
		t.Fatal(err)
	}
	// A second handle given an overlapping range behind the table's back.
	tab.add(tab.files[1], Lock{Session: 2, Handle: 20, Span: Span{2, 6}, Seq: 1})
	if tab.check() == nil {
		t.Error("two handles holding stripes 2-4 passed")
	}
	tab.files[1].locks = tab.files[1].locks[:1]
	if tab.check() == nil {
		t.Error("a lock count one off passed")
	}
}
