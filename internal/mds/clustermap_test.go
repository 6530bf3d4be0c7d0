package mds

import (
	"testing"
	"time"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/mdsproto"
)

// A process serving by the leader's OSD map judges OSDs by it only while
// it is current: when the leader falls silent (it died; its successor
// waits out its session), the last map's view holds instead of every OSD
// decaying to down on every other process — a leader's death is no
// evidence about the OSDs. The process that takes the lead then gives the
// OSDs up in that view a fresh grace to heartbeat to it, and judges by
// its own heartbeats from then on.
func TestAdoptedOSDMapHoldsWhileTheLeaderIsSilent(t *testing.T) {
	const downAfter = 2 * time.Second
	t0 := time.Unix(1_000_000, 0)
	m := newClusterMap(downAfter, time.Hour, t0)
	m.live.StaleAfter = time.Second
	pubs := []osdPub{
		{osdRec: osdRec{ID: 1}, Heard: true, SilentNs: int64(1500 * time.Millisecond)}, // heard within the down timeout (2 s)
		{osdRec: osdRec{ID: 2}, Heard: true, SilentNs: int64(5 * time.Second)},         // down already
		{osdRec: osdRec{ID: 3}, Heard: true, SilentNs: int64(2500 * time.Millisecond)}, // down by the leader, not yet by this copy
	}
	at := t0.Add(10 * time.Second)
	m.adopt(pubs, at)
	state := func(now time.Time) map[uint32]string {
		out := map[uint32]string{}
		for id, v := range m.views(now) {
			out[id] = v.State
		}
		return out
	}
	if s := state(at); s[1] != mdsproto.StateUp || s[2] != mdsproto.StateDown {
		t.Fatalf("as published: %v", s)
	}
	// A copy of the leader's map is up to staleAfter old: an OSD the
	// leader heard within the down timeout is not judged down here
	// before the leader could have.
	if s := state(at.Add(m.live.StaleAfter)); s[1] != mdsproto.StateUp {
		t.Fatalf("a publication period on: %v", s)
	}
	// The leader is silent for a minute: its last map stands.
	later := at.Add(time.Minute)
	if s := state(later); s[1] != mdsproto.StateUp || s[2] != mdsproto.StateDown {
		t.Fatalf("a minute after the leader's last map: %v, want its view held", s)
	}
	if len(m.upCandidates(later)) != 1 {
		t.Fatalf("placement candidates while the leader is silent: %v", m.upCandidates(later))
	}
	// A leader that lives but has not published for longer than any
	// takeover: the held view ends, and the silence counts on.
	if s := state(at.Add(m.live.StaleAfter + cluster.MaxMapHold + downAfter)); s[1] != mdsproto.StateDown {
		t.Fatalf("past the longest hold: %v", s)
	}
	// This process takes the lead: OSD 1 has downAfter to heartbeat to it.
	m.takeLead(later)
	if s := state(later.Add(downAfter / 2)); s[1] != mdsproto.StateUp || s[2] != mdsproto.StateDown || s[3] != mdsproto.StateDown {
		t.Fatalf("just after taking the lead: %v, want those the leader had published down still down", s)
	}
	if s := state(later.Add(2 * downAfter)); s[1] != mdsproto.StateDown {
		t.Fatalf("the leader's own judgement, an OSD silent since it took the lead: %v", s)
	}
}
