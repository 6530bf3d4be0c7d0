package mds

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// OSDs that name their host and rack in their heartbeats get files whose
// parity groups use distinct racks (six racks for ec:4+2), and status
// shows the domains; a hostile name is refused.
func TestPlacementKeepsGroupsApartInRacks(t *testing.T) {
	key := testKey(t)
	s, err := Start(context.Background(), Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rackOf := map[uint32]string{}
	beat := func(i int, host, rack string) error {
		hb := mdsproto.HeartbeatReq{UUID: fmt.Sprintf("osd-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1+i),
			CapacityBytes: 1 << 40, FreeBytes: 1 << 40, TimeNs: time.Now().UnixNano(), Host: host, Rack: rack}
		hb.Sig = key.Sign("heartbeat", hb.SignedBytes())
		var resp mdsproto.HeartbeatResp
		err := handleOp(t, s, mdsproto.OpHeartbeat, hb, &resp)
		if err == nil {
			rackOf[resp.ID] = rack
		}
		return err
	}
	// Twelve OSDs: six racks of two hosts.
	for i := range 12 {
		if err := beat(i, fmt.Sprint("h", i), fmt.Sprint("r", i/2)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 30 {
		var f mdsproto.OpenResp
		req := mdsproto.CreateReq{Path: fmt.Sprintf("/f%d", i), Mode: 0o644, SizeHint: -1, Layout: "ec:4+2"}
		if err := handleOp(t, s, mdsproto.OpCreate, req, &f); err != nil {
			t.Fatal(err)
		}
		l := f.Inode.Layout
		for g := range l.Groups {
			seen := map[string]bool{}
			for _, id := range l.OSDs[g*6 : (g+1)*6] {
				if seen[rackOf[id]] {
					t.Fatalf("file %d group %d puts two components in rack %s: %v", i, g, rackOf[id], l.OSDs)
				}
				seen[rackOf[id]] = true
			}
		}
	}
	var st mdsproto.StatusResp
	if err := handleOp(t, s, mdsproto.OpStatus, struct{}{}, &st); err != nil {
		t.Fatal(err)
	}
	for _, o := range st.OSDs {
		if o.Rack != rackOf[o.ID] || o.Host == "" {
			t.Fatalf("status shows OSD %d in host %q rack %q, want rack %q", o.ID, o.Host, o.Rack, rackOf[o.ID])
		}
	}
	if err := beat(20, "h\x00evil", "r0"); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("a host name with a NUL: %v, want ErrBadRequest", err)
	}
}
