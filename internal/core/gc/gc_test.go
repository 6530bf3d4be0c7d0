package gc

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives a record through testdata's transcripts:
//
//	merge objects=COMP@OSD,... bytes=N not-before=T
//	due now=T deadline=T [repairing]
//	deleted objects=COMP@OSD,...     (confirmed by their OSDs)
//	show
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var rec Record
		gone := false
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			num := func(key string) int64 { return transcript.Int(t, d, key) }
			pairs := func() []Pair {
				var out []Pair
				for _, f := range strings.Split(transcript.Str(t, d, "objects"), ",") {
					c, o, _ := strings.Cut(f, "@")
					ci, _ := strconv.Atoi(c)
					oi, _ := strconv.Atoi(o)
					out = append(out, Pair{uint32(ci), uint32(oi)})
				}
				return out
			}
			switch d.Cmd {
			case "merge":
				var comps, osds []uint32
				for _, p := range pairs() {
					comps, osds = append(comps, p.Comp), append(osds, p.OSD)
				}
				Merge(&rec, 1, comps, osds, num("bytes"), num("not-before"))
				return show(&rec, gone)
			case "due":
				return fmt.Sprint(Due(num("now"), num("deadline"), d.HasArg("repairing")))
			case "deleted":
				del := map[Pair]bool{}
				for _, p := range pairs() {
					del[p] = true
				}
				rec, gone = Shrink(rec, del)
				return show(&rec, gone)
			case "show":
				osds, comps := ByOSD(&rec)
				var out []string
				for _, id := range osds {
					out = append(out, fmt.Sprintf("delete on OSD %d: components %v", id, comps[id]))
				}
				return strings.Join(out, "\n")
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func show(r *Record, gone bool) string {
	if gone {
		return "record goes"
	}
	var objs []string
	for i, c := range r.Comps {
		objs = append(objs, fmt.Sprintf("%d@%d", c, r.OSDs[i]))
	}
	return fmt.Sprintf("objects %s, %d bytes, not before %d", strings.Join(objs, ","), r.Bytes, r.NotBeforeNs)
}
