package mds_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/simdisk"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// A worker that is assigned a repair and dies never reports it done. Its assignment
// must expire with its repair lock, so that another worker repairs the
// file; and `braid status` must stop counting it as active. The cluster
// runs on simulated time (synctest), so the lock's ten minutes pass at
// once.
func TestDeadWorkersAssignmentExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cl := assignAndDie(t, 1, mdsproto.RepairAssignReq{Worker: "doomed"})
		healUntilClean(t, cl, 30*time.Minute, true)
		r, err := cl.Open(context.Background(), "/f")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := make([]byte, 4)
		if _, err := r.ReadAt(got, 0); err != nil || string(got) != "data" {
			t.Fatalf("read after the repair: %q %v", got, err)
		}
	})
}

// A worker running in one of several MDS processes is assigned a repair by
// the leader, and its process dies. The leader finds the process gone
// once its session lapses and ends the assignment then: another worker
// repairs the file within a minute, not after the ten-minute repair
// lease (as TestDeadWorkersAssignmentExpires, a worker of its own, must wait).
func TestAssignmentOfADeadProcessEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cl := assignAndDie(t, 2, mdsproto.RepairAssignReq{Worker: "mds1-worker/0", Process: "mds1"})
		c.KillMDS(1) // the worker's process dies with it
		healUntilClean(t, cl, time.Minute, false)
	})
}

// assignAndDie starts a cluster with mdsCount MDS processes and no repair workers
// of theirs, writes /f, marks a component of it dirty, and has the leader
// assign its repair to req's worker, which then goes silent.
func assignAndDie(t *testing.T, mdsCount int, req mdsproto.RepairAssignReq) (*testcluster.Cluster, *braid.Client) {
	t.Helper()
	ctx := context.Background()
	nw := simnet.New()
	c := testcluster.Start(t, testcluster.Options{OSDs: 4, RepairWorkers: -1, Network: nw, OSDFS: simdisk.New(0), MDSCount: mdsCount})
	cl := c.Dial()
	writeSmall(t, cl, "/f")
	fi, err := cl.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := wire.DialOn(ctx, nw, c.MDS.Addr()) // the leader (the oldest session)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() // the worker goes silent holding the assignment
	call := rawCaller(t, conn)
	call(mdsproto.OpMarkDirty, mdsproto.MarkDirtyReq{Ino: fi.Ino, Comps: []uint32{1}}, nil)
	var task mdsproto.RepairTask
	call(mdsproto.OpRepairAssign, req, &task)
	if task.Inode.Ino != fi.Ino {
		t.Fatalf("assignment gave %q of ino %d, want ino %d", task.Kind, task.Inode.Ino, fi.Ino)
	}
	return c, cl
}

// healUntilClean runs another worker until /f is clean (and, with
// idle, status counts no repair active), failing past within of
// simulated time.
func healUntilClean(t *testing.T, cl *braid.Client, within time.Duration, idle bool) {
	t.Helper()
	ctx := context.Background()
	hctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cl.Heal(hctx, braid.HealOptions{Name: "survivor", Poll: time.Second}) }()
	defer func() { stop(); <-done }()
	deadline := time.Now().Add(within) // simulated
	for {
		fi, ferr := cl.Stat(ctx, "/f")
		dirty := ferr != nil || fi.Layout.Components[0].Dirty || fi.Layout.Components[1].Dirty
		active := 0
		if idle {
			st, err := cl.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			active = st.Repair.Active
		}
		if !dirty && active == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v (simulated) after the worker holding the assignment died: active %d, dirty %v (%v)", within, active, dirty, ferr)
		}
		<-time.After(10 * time.Second) // simulated time: the cluster's clocks move on
	}
}

// The leader's own worker is assigned a repair, and the leader dies: the next
// leader never handed that assignment out, but the repair lock names the
// worker's process, which is not among the processes active now. The
// assignment is dead, and another worker repairs the file within a minute.
func TestAssignmentOfADeadLeadersWorkerEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cl := assignAndDie(t, 3, mdsproto.RepairAssignReq{Worker: "mds0-worker/0", Process: "mds0"})
		c.KillMDS(0) // the leader, and its worker with it
		healUntilClean(t, cl, time.Minute, false)
	})
}
