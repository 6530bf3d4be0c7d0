package repair

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestBalanceTranscripts drives Target and PickMove through
// testdata/balance/*:
//
//	target est=ID:BYTES,... [state=ID:down|out|drain,...] slack=N
//	pick osds=1,2,... width=W bytes=B,B,... hi=H lo=L diff=D
func TestBalanceTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/balance", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			str := func(key string) string { return transcript.Str(t, d, key) }
			num := func(key string) int64 { return transcript.Int(t, d, key) }
			ints := func(key string) []int64 { return transcript.Ints(t, d, key) }
			switch d.Cmd {
			case "target":
				est := map[uint32]int64{}
				views := map[uint32]cluster.View{}
				for _, f := range strings.Split(str("est"), ",") {
					id, b, _ := strings.Cut(f, ":")
					i, _ := strconv.Atoi(id)
					n, _ := strconv.ParseInt(b, 10, 64)
					est[uint32(i)] = n
					views[uint32(i)] = cluster.View{State: cluster.StateUp}
				}
				for _, f := range strings.Split(str("state"), ",") {
					if id, st, ok := strings.Cut(f, ":"); ok {
						i, _ := strconv.Atoi(id)
						if st == "drain" {
							views[uint32(i)] = cluster.View{State: cluster.StateUp, Drain: true}
						} else {
							views[uint32(i)] = cluster.View{State: st}
						}
					}
				}
				hi, lo, diff, ok := Target(est, views, num("slack"))
				if !ok {
					return fmt.Sprintf("balanced (fullest %d, emptiest %d, %d apart)", hi, lo, diff)
				}
				return fmt.Sprintf("move from %d to %d (%d apart)", hi, lo, diff)
			case "pick":
				var osds []uint32
				for _, x := range ints("osds") {
					osds = append(osds, uint32(x))
				}
				b := ints("bytes")
				m, ok := PickMove(osds, int(num("width")), func(c int) int64 { return b[c] }, uint32(num("hi")), uint32(num("lo")), num("diff"))
				if !ok {
					return "no move"
				}
				return fmt.Sprintf("component %d (%d bytes) from %d to %d: %v", m.Comp, m.Bytes, m.From, m.To, m.Apply(osds, int(num("width"))))
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}
