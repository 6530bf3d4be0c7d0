package repair

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestAssignmentTranscripts drives the book of assignments through
// testdata/assignments/*:
//
//	actives names=a,b at=T           the leader's look at the MDS processes (requeued scrubs shown)
//	forget-actives
//	record ino=I at=T version=V kind=K [process=P] [balance]
//	assignable ino=I at=T
//	dead ino=I version=V [process=P] [own=N]
//	in-flight ino=I d=±1
//	backoff ino=I until=T
//	done ino=I version=V
//	kinds at=T
//
// Times are durations after an epoch.
func TestAssignmentTranscripts(t *testing.T) {
	epoch := time.Unix(1_000_000, 0)
	datadriven.Walk(t, "testdata/assignments", func(t *testing.T, path string) {
		c := NewAssignments()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			str := func(key string) string { return transcript.Str(t, d, key) }
			num := func(key string) int64 { return transcript.Int(t, d, key) }
			at := func(key string) time.Time { return epoch.Add(transcript.Dur(t, d, key)) }
			ino := func() uint64 { return uint64(num("ino")) }
			defer func() {
				if err := c.check(); err != nil {
					t.Fatalf("%s: invariant: %v", d.Pos, err)
				}
			}()
			switch d.Cmd {
			case "actives":
				var names []string
				if s := str("names"); s != "" {
					names = strings.Split(s, ",")
				}
				if rq := c.NoteActives(names, at("at")); len(rq) > 0 {
					return fmt.Sprintf("scrubs queued again: %v", rq)
				}
				return "ok"
			case "forget-actives":
				c.ForgetActives()
				return "ok"
			case "record":
				c.Record(ino(), Assigned{At: at("at"), Version: uint64(num("version")), Kind: str("kind"), Process: str("process"), Balance: d.HasArg("balance")})
				return "ok"
			case "assignable":
				return fmt.Sprint(c.Assignable(ino(), at("at")))
			case "dead":
				own := 0
				if d.HasArg("own") {
					own = int(num("own"))
				}
				return fmt.Sprint(c.Dead(ino(), uint64(num("version")), str("process"), own))
			case "in-flight":
				c.InFlight(ino(), int(num("d")))
				return "ok"
			case "backoff":
				c.Backoff(ino(), at("until"))
				return "ok"
			case "done":
				c.Done(ino(), uint64(num("version")))
				return "ok"
			case "kinds":
				r, s, b := c.ActiveKinds(at("at"))
				return fmt.Sprintf("rebuild=%d scrub=%d balance=%d", r, s, b)
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}
