package mds_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// writeSmall creates p as a mirror:2 file holding "data".
func writeSmall(t *testing.T, cl *braid.Client, p string) {
	t.Helper()
	f, err := cl.Create(context.Background(), p, braid.CreateOptions{Layout: "mirror:2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// rawCaller calls the MDS over conn as any peer could, failing t on an
// error, and decodes the reply into resp (if not nil).
func rawCaller(t *testing.T, conn *wire.Client) func(op uint16, req, resp any) {
	return func(op uint16, req, resp any) {
		t.Helper()
		body, _ := mdsproto.Marshal(req)
		meta, _, err := conn.Call(context.Background(), op, body, nil, nil)
		if err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
		if resp != nil {
			if err := mdsproto.Unmarshal(meta, resp); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Once a full scan finds nothing to repair, assignments read only the heal
// index. Work must still be found: a file reported dirty afterwards (it is
// in the index), and every file of an OSD that goes out (not in the index:
// the changed cluster map brings the full scan back).
func TestRepairClaimsFindWorkAfterSteadyState(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 4, RepairWorkers: -1, OSDOutAfter: 3 * time.Second})
	cl := c.Dial()
	for i := 0; i < 6; i++ {
		writeSmall(t, cl, fmt.Sprintf("/f%d", i))
	}
	conn, err := wire.Dial(ctx, c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := rawCaller(t, conn)
	assignment := func() mdsproto.RepairTask {
		var task mdsproto.RepairTask
		call(mdsproto.OpRepairAssign, mdsproto.RepairAssignReq{Worker: "test"}, &task)
		return task
	}
	if task := assignment(); task.Kind != "" {
		t.Fatalf("healthy cluster handed out %s of ino %d", task.Kind, task.Inode.Ino)
	}

	fi, err := cl.Stat(ctx, "/f3")
	if err != nil {
		t.Fatal(err)
	}
	call(mdsproto.OpMarkDirty, mdsproto.MarkDirtyReq{Ino: fi.Ino, Comps: []uint32{1}}, nil)
	if task := assignment(); task.Kind != mdsproto.RepairRebuild || task.Inode.Ino != fi.Ino {
		t.Fatalf("after marking ino %d dirty, assignment gave %q for ino %d", fi.Ino, task.Kind, task.Inode.Ino)
	}

	// Every file on an OSD holding /f0 must be handed out once it is out.
	f0, err := cl.Stat(ctx, "/f0")
	if err != nil {
		t.Fatal(err)
	}
	victim := f0.Layout.Components[0].OSD
	if f0.Ino == fi.Ino {
		t.Fatal("two paths, one ino")
	}
	want := map[uint64]bool{}
	for i := 0; i < 6; i++ {
		fi, err := cl.Stat(ctx, fmt.Sprintf("/f%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(fi.Layout.Components, func(c braid.Component) bool { return c.OSD == victim }) {
			want[fi.Ino] = true
		}
	}
	delete(want, fi.Ino) // assigned above, locked now
	stop := slices.IndexFunc(c.OSDs, func(o *osd.Server) bool { return o.ID() == victim })
	c.StopOSD(stop)
	got := map[uint64]bool{}
	testcluster.Eventually(t, 30*time.Second, func() bool {
		if task := assignment(); task.Kind != "" {
			got[task.Inode.Ino] = true
		}
		for ino := range want {
			if !got[ino] {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("assignments after OSD %d went out: %v, want all of %v", victim, got, want)
	})
}
