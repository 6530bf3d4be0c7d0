package mds

import (
	"sort"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
)

// osdRec is the stored form of an OSD's identity.
type osdRec struct {
	Format int    `json:"v"`
	ID     uint32 `json:"id"`
	UUID   string `json:"uuid"`
	Addr   string `json:"addr"`
	// Drain marks an OSD being emptied: placement skips it and repair
	// moves its components elsewhere.
	Drain bool `json:"drain,omitempty"`
}

// osdState is what the MDS knows of an OSD: its identity (persistent) and
// its last heartbeat (in memory; after an MDS restart every OSD is down
// until it next reports, a second later).
type osdState struct {
	osdRec
	lastSeen time.Time
	hb       mdsproto.HeartbeatReq
}

// clusterMap tracks the OSDs; the core's Liveness decides which are up,
// down or out.
type clusterMap struct {
	mu   sync.Mutex
	osds map[uint32]*osdState
	live cluster.Liveness
}

// takeLead makes this process judge OSDs by its own heartbeats from now,
// having judged them by the leader's map: the OSDs up in that map's view
// count as heard now, so they have the down timeout to heartbeat to it.
func (m *clusterMap) takeLead(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.live.AdoptedAt.IsZero() {
		return
	}
	for _, st := range m.osds {
		if m.live.UpWhenAdopted(st.lastSeen) {
			st.lastSeen = now
		}
	}
	m.live.AdoptedAt = time.Time{}
}

func newClusterMap(downAfter, outAfter time.Duration, started time.Time) *clusterMap {
	return &clusterMap{osds: map[uint32]*osdState{}, live: cluster.Liveness{DownAfter: downAfter, OutAfter: outAfter, Started: started}}
}

// stateOf classifies an OSD by how long it has been silent.
func (m *clusterMap) stateOf(st *osdState, now time.Time) string {
	return m.live.State(st.lastSeen, now)
}

// views snapshots every OSD's state.
func (m *clusterMap) views(now time.Time) map[uint32]cluster.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[uint32]cluster.View, len(m.osds))
	for id, st := range m.osds {
		out[id] = cluster.View{State: m.stateOf(st, now), Drain: st.Drain}
	}
	return out
}

// setDrain marks or unmarks an OSD for draining and returns its record.
func (m *clusterMap) setDrain(id uint32, on bool) (osdRec, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.osds[id]
	if st == nil {
		return osdRec{}, false
	}
	st.Drain = on
	return st.osdRec, true
}

func (m *clusterMap) load(r kv.Reader) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ferr error
	err := r.Scan(firstKey(pOSD), pastKeys(pOSD), func(k, v []byte) bool {
		var rec osdRec
		if err := decodeRecord(v, &rec); err != nil {
			ferr = err
			return false
		}
		m.osds[rec.ID] = &osdState{osdRec: rec}
		return true
	})
	if err != nil {
		return err
	}
	return ferr
}

// isUp: heard from within the down timeout, as Liveness judges.
func (m *clusterMap) isUp(st *osdState, now time.Time) bool { return m.live.Up(st.lastSeen, now) }

// upCandidates lists the OSDs placement may use: up and not draining.
func (m *clusterMap) upCandidates(now time.Time) []placement.Candidate {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []placement.Candidate
	for id, st := range m.osds {
		if m.isUp(st, now) && !st.Drain {
			out = append(out, placement.Candidate{ID: id, FreeBytes: st.hb.FreeBytes, Host: st.hb.Host, Rack: st.hb.Rack})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// knownCandidates is every OSD that is not draining, up or not.
func (m *clusterMap) knownCandidates() []placement.Candidate {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []placement.Candidate
	for id, st := range m.osds {
		if !st.Drain {
			out = append(out, placement.Candidate{ID: id, FreeBytes: st.hb.FreeBytes, Host: st.hb.Host, Rack: st.hb.Rack})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// idOf finds a known OSD by its uuid.
func (m *clusterMap) idOf(uuid string) (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, st := range m.osds {
		if st.UUID == uuid {
			return id, true
		}
	}
	return 0, false
}

func (m *clusterMap) known() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.osds)
}

func (m *clusterMap) endpoints(ids []uint32, now time.Time) map[uint32]mdsproto.Endpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[uint32]mdsproto.Endpoint, len(ids))
	for _, id := range ids {
		if st := m.osds[id]; st != nil {
			out[id] = mdsproto.Endpoint{Addr: st.Addr, Up: m.isUp(st, now)}
		}
	}
	return out
}

func (m *clusterMap) endpoint(id uint32, now time.Time) (mdsproto.Endpoint, bool) {
	e, ok := m.endpoints([]uint32{id}, now)[id]
	return e, ok
}

// beat records a heartbeat from a known OSD and reports whether its
// persistent record (address) changed.
func (m *clusterMap) beat(rec osdRec, hb mdsproto.HeartbeatReq, now time.Time) (changed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.osds[rec.ID]
	if st == nil {
		st = &osdState{osdRec: rec}
		m.osds[rec.ID] = st
		changed = true
	}
	if st.Addr != rec.Addr || st.UUID != rec.UUID {
		rec.Drain = st.Drain
		st.osdRec, changed = rec, true
	}
	st.lastSeen, st.hb = now, hb
	return changed
}

func (m *clusterMap) status(now time.Time) []mdsproto.OSDStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]mdsproto.OSDStatus, 0, len(m.osds))
	for id, st := range m.osds {
		s := mdsproto.OSDStatus{ID: id, Addr: st.Addr, State: m.stateOf(st, now), Draining: st.Drain,
			CapacityBytes: st.hb.CapacityBytes, UsedBytes: st.hb.UsedBytes, FreeBytes: st.hb.FreeBytes, Pid: st.hb.Pid,
			Disk: st.hb.Disk, DiskBytes: st.hb.DiskBytes, DiskFreeBytes: st.hb.DiskFreeBytes, Host: st.hb.Host, Rack: st.hb.Rack}
		if !st.lastSeen.IsZero() {
			s.LastSeenNs = st.lastSeen.UnixNano()
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// forget drops an OSD from the map. Its uuid keeps its id, so if the same
// OSD ever returns it is known again.
func (m *clusterMap) forget(id uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.osds, id)
}

// publish is the map as the leader publishes it (multi.go), by id.
func (m *clusterMap) publish(now time.Time) []osdPub {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]osdPub, 0, len(m.osds))
	for _, st := range m.osds {
		p := osdPub{osdRec: st.osdRec, Capacity: st.hb.CapacityBytes, Used: st.hb.UsedBytes, Free: st.hb.FreeBytes, Pid: st.hb.Pid,
			Disk: st.hb.Disk, DiskBytes: st.hb.DiskBytes, DiskFree: st.hb.DiskFreeBytes, Host: st.hb.Host, Rack: st.hb.Rack}
		if !st.lastSeen.IsZero() {
			p.Heard, p.SilentNs = true, max(int64(now.Sub(st.lastSeen)), 0)
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// adopt makes the map the leader's, read with a request sent at sent: an
// OSD the leader had heard from counts as heard its silence before that.
func (m *clusterMap) adopt(pubs []osdPub, sent time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live.AdoptedAt = sent
	seen := make(map[uint32]bool, len(pubs))
	for _, p := range pubs {
		seen[p.ID] = true
		st := m.osds[p.ID]
		if st == nil {
			st = &osdState{}
			m.osds[p.ID] = st
		}
		st.osdRec = p.osdRec
		if p.Heard {
			if at := sent.Add(-time.Duration(p.SilentNs)); at.After(st.lastSeen) {
				st.lastSeen = at
			}
			st.hb.CapacityBytes, st.hb.UsedBytes, st.hb.FreeBytes, st.hb.Pid = p.Capacity, p.Used, p.Free, p.Pid
			st.hb.Disk, st.hb.DiskBytes, st.hb.DiskFreeBytes = p.Disk, p.DiskBytes, p.DiskFree
			st.hb.Host, st.hb.Rack = p.Host, p.Rack
		}
	}
	for id := range m.osds {
		if !seen[id] {
			delete(m.osds, id)
		}
	}
}
