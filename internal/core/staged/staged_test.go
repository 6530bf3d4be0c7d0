package staged

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives the decisions through testdata's transcripts:
//
//	staged tolerates=N [width=W] units=COMP:OUTCOME,...
//	applied units=COMP:OUTCOME,...
//	commit [found] [committed] [expired]
//	resolve state=prepared|committed osd=up|down|gone
//	resolved state=prepared|committed out=OUTCOME
//	plan state=prepared|committed units=COMP:up|down|gone[:data],...
//	answer unit=I out=OUTCOME   (to the last plan)
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var res *Resolution
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			val := func(key string) string {
				for _, a := range d.CmdArgs {
					if a.Key == key && len(a.Vals) > 0 {
						return a.Vals[0]
					}
				}
				d.Fatalf(t, "%s: missing", key)
				return ""
			}
			switch d.Cmd {
			case "staged":
				n, err := strconv.Atoi(val("tolerates"))
				if err != nil {
					d.Fatalf(t, "tolerates: %v", err)
				}
				width := 1 << 20 // one group unless the transcript says
				if d.HasArg("width") {
					if width, err = strconv.Atoi(val("width")); err != nil {
						d.Fatalf(t, "width: %v", err)
					}
				}
				r := Staged(units(t, d, val("units")), n, width)
				return fmt.Sprintf("restage=%v abort=%v commit=%v mark-dirty=%v", r.Restage, r.Abort, r.Commit, r.MarkDirty)
			case "applied":
				r := Applied(units(t, d, val("units")))
				return fmt.Sprintf("mark-dirty=%v close=%v abort-broken=%v", r.MarkDirty, r.Close, r.AbortBroken)
			case "commit":
				state := Prepared
				if d.HasArg("committed") {
					state = Committed
				}
				return [...]string{"committed now", "committed already (the answer to a copy)", "refused: expired", "refused: unknown"}[Commit(d.HasArg("found"), state, d.HasArg("expired"))]
			case "resolve":
				return Resolve(stateOf(t, d, val("state")), osdOf(t, d, val("osd"))).String()
			case "resolved":
				return Resolved(stateOf(t, d, val("state")), outcomeOf(t, d, val("out"))).String()
			case "plan":
				res = Plan(stateOf(t, d, val("state")), intentUnits(t, d, val("units")))
				return resolution(res)
			case "answer":
				i, err := strconv.Atoi(val("unit"))
				if res == nil || err != nil || i < 0 || i >= len(res.Units) {
					d.Fatalf(t, "answer without a plan, or unit %q out of range", val("unit"))
				}
				a := res.Answer(i, outcomeOf(t, d, val("out")))
				return a.String() + "; " + resolution(res)
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func units(t *testing.T, d *datadriven.TestData, text string) []Unit {
	var out []Unit
	for _, p := range strings.Split(text, ",") {
		c, o, _ := strings.Cut(p, ":")
		n, err := strconv.Atoi(c)
		if err != nil {
			d.Fatalf(t, "unit %q", p)
		}
		out = append(out, Unit{Comp: n, Out: outcomeOf(t, d, o)})
	}
	return out
}

func outcomeOf(t *testing.T, d *datadriven.TestData, s string) Outcome {
	for o := Done; o <= Unreachable; o++ {
		if o.String() == s {
			return o
		}
	}
	d.Fatalf(t, "outcome %q", s)
	return 0
}

func stateOf(t *testing.T, d *datadriven.TestData, s string) IntentState {
	switch s {
	case "prepared":
		return Prepared
	case "committed":
		return Committed
	}
	d.Fatalf(t, "state %q", s)
	return 0
}

func osdOf(t *testing.T, d *datadriven.TestData, s string) OSDState {
	switch s {
	case "up":
		return Up
	case "down":
		return Down
	case "gone":
		return Gone
	}
	d.Fatalf(t, "osd %q", s)
	return 0
}

func intentUnits(t *testing.T, d *datadriven.TestData, text string) []IntentUnit {
	var out []IntentUnit
	for _, p := range strings.Split(text, ",") {
		f := strings.Split(p, ":")
		n, err := strconv.Atoi(f[0])
		if err != nil || len(f) < 2 {
			d.Fatalf(t, "unit %q", p)
		}
		out = append(out, IntentUnit{Comp: uint32(n), OSD: osdOf(t, d, f[1]), HoldsData: len(f) > 2 && f[2] == "data"})
	}
	return out
}

// resolution prints a plan: what is sent (and which must find its
// object), lost, left and aborted, by component.
func resolution(r *Resolution) string {
	comps := func(idx []int) []uint32 {
		out := []uint32{}
		for _, i := range idx {
			out = append(out, r.Units[i].Comp)
		}
		return out
	}
	var must []uint32
	for _, i := range r.Send {
		if r.MustExist(i) {
			must = append(must, r.Units[i].Comp)
		}
	}
	op := "abort"
	if r.Apply() {
		op = "apply"
	}
	return fmt.Sprintf("%s to %v (must exist %v) lost=%v left=%v abort=%v done=%v", op, comps(r.Send), must, r.Lost, comps(r.Left), comps(r.Abort), r.Done())
}
