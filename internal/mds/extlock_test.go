package mds

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/braidfs/braid/internal/mdsproto"
)

// TestExtentLockTranscripts drives the extent lock table through the
// transcripts in testdata/extlock (events, and the decision each one
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
func TestExtentLockTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/extlock", func(t *testing.T, path string) {
		start := time.Unix(1_000_000, 0)
		now := start
		const lease = 4 * time.Second
		tab := newExtentTable(lease, now)
		since := func(at time.Time) string { return "+" + at.Sub(start).String() }
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string, def int64) int64 {
				for _, a := range d.CmdArgs {
					if a.Key == key {
						if a.Vals[0] == "max" {
							return mdsproto.MaxStripe
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
				r := tab.acquire(now, ino, uint64(arg("session", -1)), uint64(arg("handle", -1)),
					span{arg("lo", -1), arg("hi", -1)}, true, !d.HasArg("norecall"))
				switch {
				case r.granted:
					return fmt.Sprintf("granted %s seq=%d end=%d gen=%d epoch=%d", spanText(r.grant), r.seq, r.end, r.endGen, r.epoch)
				case r.full:
					return "full"
				case !r.until.IsZero():
					return "wait until " + since(r.until)
				}
				return "wait"
			case "release":
				seq := uint64(math.MaxUint64)
				if d.HasArg("seq") {
					seq = uint64(arg("seq", -1))
				}
				tab.release(ino, uint64(arg("handle", -1)), span{arg("lo", -1), arg("hi", -1)}, seq, arg("end", 0), uint64(arg("gen", 0)))
				return "ok"
			case "drop":
				tab.dropHandle(ino, uint64(arg("handle", -1)))
				return "ok"
			case "reclaim":
				var text string
				d.ScanArgs(t, "spans", &text)
				var spans []span
				for _, p := range strings.Split(text, ",") {
					lo, hi, _ := strings.Cut(p, "-")
					l, err1 := strconv.ParseInt(lo, 10, 64)
					h, err2 := strconv.ParseInt(hi, 10, 64)
					if hi == "max" {
						h, err2 = mdsproto.MaxStripe, nil
					}
					if err1 != nil || err2 != nil {
						d.Fatalf(t, "spans %q", text)
					}
					spans = append(spans, span{l, h})
				}
				seq, epoch, err := tab.reclaim(now, ino, uint64(arg("session", -1)), uint64(arg("handle", -1)), spans, arg("end", 0), uint64(arg("gen", 0)))
				if err != nil {
					return "refused: " + err.Error()
				}
				return fmt.Sprintf("reclaimed seq=%d epoch=%d", seq, epoch)
			case "committed":
				tab.committed(ino, arg("size", -1), uint64(arg("gen", -1)))
				return "ok"
			case "truncated":
				tab.truncated(ino, uint64(arg("gen", -1)))
				return "ok"
			case "wait":
				a, wake, err := tab.wait(now, uint64(arg("session", -1)))
				if err != nil {
					return "error: " + err.Error()
				}
				if wake != nil {
					select {
					case <-wake:
						return "woken" // never: the channel is new
					default:
					}
					a = tab.waited(now, uint64(arg("session", -1)))
					out := fmt.Sprintf("nothing recalled epoch=%d", a.epoch)
					for _, ino := range a.moved {
						out += fmt.Sprintf("\nmoved again ino=%d", ino)
					}
					return out
				}
				out := []string{fmt.Sprintf("epoch=%d", a.epoch)}
				for _, r := range a.recalls {
					out = append(out, fmt.Sprintf("recall ino=%d handle=%d %s seq=%d", r.Ino, r.Handle, spanText(span{r.Lo, r.Hi}), r.Seq))
				}
				for _, ino := range a.moved {
					out = append(out, fmt.Sprintf("moved ino=%d", ino))
				}
				return strings.Join(out, "\n")
			case "moveaway":
				// The inode's slot moved to another process.
				tab.dropInos(now, func(i uint64) bool { return i == ino })
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
				tab = newExtentTable(lease, now)
				tab.grace(now, 0)
				return "grace until " + since(now.Add(lease))
			case "gain":
				var e string
				d.ScanArgs(t, "extra", &e)
				extra, err := time.ParseDuration(e)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				slot := uint32(arg("slot", -1))
				tab.graceSlots(now, []uint32{slot}, extra)
				return "grace of slot until " + since(tab.slotGraceEnd[slot])
			case "locks":
				ls := tab.held(ino)
				slices.SortFunc(ls, func(a, b extentLock) int {
					return int(min(max(a.lo-b.lo, -1), 1))
				})
				if len(ls) == 0 {
					return "none"
				}
				var out []string
				for _, l := range ls {
					out = append(out, fmt.Sprintf("session=%d handle=%d %s seq=%d", l.session, l.handle, spanText(l.span), l.seq))
				}
				return strings.Join(out, "\n")
			case "empty":
				empty, at := tab.empty(now)
				if !empty {
					return "held"
				}
				return "empty since " + since(at)
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func spanText(s span) string {
	hi := strconv.FormatInt(s.hi, 10)
	if s.hi == mdsproto.MaxStripe {
		hi = "max"
	}
	return fmt.Sprintf("[%d, %s)", s.lo, hi)
}
