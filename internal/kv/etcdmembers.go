package kv

// The MDS processes sharing an etcd cluster say who they are: each puts a
// record under "<prefix>mds/<name>" on the lease of the session it
// queues for the lead with (Lead), so the record disappears with the
// process (its lease runs out) and the one whose lease holds the lead
// lock is the active. `braid status` shows them, with the health of
// every etcd member the client knows.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Process roles.
const (
	RoleActive  = "active"
	RoleStandby = "standby"
	RoleLeader  = "leader" // of several actives, the one holding the lead
)

// ProcessRecord is what an MDS process says of itself.
type ProcessRecord struct {
	Name      string `json:"name"`
	Addr      string `json:"addr"` // where it serves (an active), or will ("" : a port not yet chosen)
	Pid       int    `json:"pid"`
	Host      string `json:"host"`
	StartedNs int64  `json:"started_ns"`
	// Joined: one of several active processes (Join), serving its slots
	// whether or not it holds the lead.
	Joined bool `json:"joined,omitempty"`
}

// ProcessStatus is a ProcessRecord with the role it holds now.
type ProcessStatus struct {
	ProcessRecord
	Role string `json:"role"`
}

// MemberStatus is one etcd member's health as its endpoint reports it.
type MemberStatus struct {
	Endpoint  string `json:"endpoint"`
	Name      string `json:"name,omitempty"`
	Leader    bool   `json:"leader"`
	DBBytes   int64  `json:"db_bytes"`
	RaftTerm  uint64 `json:"raft_term"`
	RaftIndex uint64 `json:"raft_index"`
	Error     string `json:"error,omitempty"` // unreachable, or an alarm
}

// maxProcessRecordBytes bounds a record read back: a key under the
// prefix written by something else is skipped, not trusted.
const maxProcessRecordBytes = 4096

// SelfRecord is the record of this process serving at addr, named name
// ("" : host-pid).
func SelfRecord(name, addr string) ProcessRecord {
	host, _ := os.Hostname()
	if name == "" {
		name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return ProcessRecord{Name: name, Addr: addr, Pid: os.Getpid(), Host: host, StartedNs: time.Now().UnixNano()}
}

func (e *Etcd) processKey(name string) string { return e.root + "mds/" + name }

// putRecord writes rec on lease (the session's), replacing an earlier one.
func (e *Etcd) putRecord(ctx context.Context, rec ProcessRecord, lease clientv3.LeaseID) error {
	if rec.Name == "" || strings.ContainsAny(rec.Name, "/\x00") {
		return fmt.Errorf("etcd: MDS process name %q: want a name without / or NUL", rec.Name)
	}
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
	defer cancel()
	_, err := e.cli.Put(ctx, e.processKey(rec.Name), string(b), clientv3.WithLease(lease))
	return etcdErr(err)
}

// Announce replaces this process's record (its address, once it
// listens). It needs Lead to have returned.
func (e *Etcd) Announce(ctx context.Context, rec ProcessRecord) error {
	l := e.leader()
	if l == nil {
		e.mu.Lock()
		l = e.member
		e.mu.Unlock()
	}
	if l == nil {
		return fmt.Errorf("etcd: announce before leading or joining")
	}
	return e.putRecord(ctx, rec, l.session.Lease())
}

// Processes lists the MDS processes alive on this etcd cluster, the
// active first.
func (e *Etcd) Processes(ctx context.Context) ([]ProcessStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, etcdCallTimeout)
	defer cancel()
	recs, err := e.cli.Get(ctx, e.root+"mds/", clientv3.WithPrefix())
	if err != nil {
		return nil, etcdErr(err)
	}
	// The lock's holder is the key of the lowest creation revision under
	// lead/ (concurrency.Mutex queues by it).
	lead, err := e.cli.Get(ctx, e.root+"lead/", clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, etcdErr(err)
	}
	var active int64
	if len(lead.Kvs) == 1 {
		active = lead.Kvs[0].Lease
	}
	out := make([]ProcessStatus, 0, len(recs.Kvs))
	for _, kv := range recs.Kvs {
		var p ProcessStatus
		if len(kv.Value) > maxProcessRecordBytes || json.Unmarshal(kv.Value, &p.ProcessRecord) != nil {
			continue
		}
		leads := active != 0 && kv.Lease == active
		switch {
		case p.Joined && leads:
			p.Role = RoleLeader
		case p.Joined || leads:
			p.Role = RoleActive
		default:
			p.Role = RoleStandby
		}
		out = append(out, p)
	}
	slices.SortStableFunc(out, func(a, b ProcessStatus) int {
		if ra, rb := roleOrder(a.Role), roleOrder(b.Role); ra != rb {
			return ra - rb
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// memberStatusTimeout bounds asking one etcd member how it is, so one
// that is down does not hold up a status of the others.
const memberStatusTimeout = 2 * time.Second

// Members reports each etcd member the client was given (and those the
// cluster lists beyond them): reachable or not, which one leads Raft.
func (e *Etcd) Members(ctx context.Context) []MemberStatus {
	bare := func(u string) string { return strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://") }
	var endpoints []string
	for _, ep := range e.cli.Endpoints() {
		endpoints = append(endpoints, bare(ep))
	}
	names := map[string]string{} // client host:port → member name
	mctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
	if ml, err := e.cli.MemberList(mctx); err == nil {
		for _, m := range ml.Members {
			for _, u := range m.ClientURLs {
				names[bare(u)] = m.Name
				if !slices.Contains(endpoints, bare(u)) {
					endpoints = append(endpoints, bare(u))
				}
			}
		}
	}
	cancel()
	out := make([]MemberStatus, 0, len(endpoints))
	for _, ep := range endpoints {
		m := MemberStatus{Endpoint: ep, Name: names[ep]}
		sctx, cancel := context.WithTimeout(ctx, memberStatusTimeout)
		st, err := e.cli.Status(sctx, ep)
		cancel()
		switch {
		case err != nil:
			m.Error = err.Error()
		default:
			m.Leader = st.Header.MemberId == st.Leader
			m.DBBytes, m.RaftTerm, m.RaftIndex = st.DbSize, st.RaftTerm, st.RaftIndex
			if len(st.Errors) > 0 {
				m.Error = strings.Join(st.Errors, "; ")
			}
		}
		out = append(out, m)
	}
	return out
}

// roleOrder sorts processes: the leader, actives, standbys.
func roleOrder(role string) int {
	switch role {
	case RoleLeader:
		return 0
	case RoleActive:
		return 1
	}
	return 2
}
