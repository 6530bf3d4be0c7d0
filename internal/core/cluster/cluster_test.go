package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/transcript"
	"github.com/cockroachdb/datadriven"
)

// TestTranscripts drives Liveness through testdata's transcripts. Times
// are durations after an epoch:
//
//	liveness down=D out=D started=T [stale=D]
//	adopt at=T
//	lead                              (judge by own heartbeats again)
//	judge at=T seen=T,never,...       the state of OSDs last heard at each
//	adopted seen=T,...                which were up in the adopted view
func TestTranscripts(t *testing.T) {
	epoch := time.Unix(1_000_000, 0)
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var l Liveness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			dur := func(key string) time.Duration { return transcript.Dur(t, d, key) }
			at := func(key string) time.Time { return epoch.Add(dur(key)) }
			seen := func() []time.Time {
				var out []time.Time
				for _, s := range strings.Split(transcript.Str(t, d, "seen"), ",") {
					if s == "never" {
						out = append(out, time.Time{})
						continue
					}
					x, err := time.ParseDuration(s)
					if err != nil {
						d.Fatalf(t, "seen: %v", err)
					}
					out = append(out, epoch.Add(x))
				}
				return out
			}
			switch d.Cmd {
			case "liveness":
				l = Liveness{DownAfter: dur("down"), OutAfter: dur("out"), Started: at("started")}
				if d.HasArg("stale") {
					l.StaleAfter = dur("stale")
				}
				return ""
			case "adopt":
				l.AdoptedAt = at("at")
				return ""
			case "lead":
				l.AdoptedAt = time.Time{}
				return ""
			case "judge":
				now := at("at")
				var out []string
				for _, s := range seen() {
					out = append(out, l.State(s, now))
				}
				return strings.Join(out, " ")
			case "adopted":
				var out []string
				for _, s := range seen() {
					if l.UpWhenAdopted(s) {
						out = append(out, "up")
					} else {
						out = append(out, "not-up")
					}
				}
				return strings.Join(out, " ")
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// TestCheckCatches: the invariant check refuses a state the silence
// does not allow.
func TestCheckCatches(t *testing.T) {
	l := Liveness{DownAfter: 3 * time.Second, OutAfter: time.Minute}
	now := time.Unix(1000, 0)
	if l.check(now.Add(-10*time.Second), now, StateUp) == nil {
		t.Error("up after 10s silent with a 3s timeout passed")
	}
	if l.check(now.Add(-10*time.Second), now, StateOut) == nil {
		t.Error("out after 10s silent with a 1m timeout passed")
	}
	if (&Liveness{DownAfter: time.Minute, OutAfter: time.Second}).check(now, now, StateUp) == nil {
		t.Error("an out timeout shorter than the down timeout passed")
	}
}
