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
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
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
