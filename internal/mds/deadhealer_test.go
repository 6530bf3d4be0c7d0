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

// A healer that claims a repair and dies never reports it done. Its claim
// must expire with its repair lock, so that another healer repairs the
// file; and `braid status` must stop counting it as active. The cluster
// runs on simulated time (synctest), so the lock's ten minutes pass at
// once.
func TestDeadHealersClaimExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cl := claimAndDie(t, 1, mdsproto.RepairClaimReq{Worker: "doomed"})
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

// A healer running in one of several MDS processes claims a repair from
// the leader, and its process dies. The leader finds the process gone
// once its session lapses and ends the claim then: another healer
// repairs the file within a minute, not after the ten-minute repair
// lease (as TestDeadHealersClaimExpires, a healer of its own, must wait).
func TestClaimOfADeadProcessEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cl := claimAndDie(t, 2, mdsproto.RepairClaimReq{Worker: "mds1-healer/0", Process: "mds1"})
		c.KillMDS(1) // the healer's process dies with it
		healUntilClean(t, cl, time.Minute, false)
	})
}

// claimAndDie starts a cluster with mdsCount MDS processes and no healers
// of theirs, writes /f, marks a component of it dirty, and claims its
// repair from the leader with req as a healer that then goes silent.
func claimAndDie(t *testing.T, mdsCount int, req mdsproto.RepairClaimReq) (*testcluster.Cluster, *braid.Client) {
	t.Helper()
	ctx := context.Background()
	nw := simnet.New()
	c := testcluster.Start(t, testcluster.Options{OSDs: 4, Healers: -1, Network: nw, OSDFS: simdisk.New(0), MDSCount: mdsCount})
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
	defer conn.Close() // the healer goes silent holding the claim
	call := rawCaller(t, conn)
	call(mdsproto.OpMarkDirty, mdsproto.MarkDirtyReq{Ino: fi.Ino, Comps: []uint32{1}}, nil)
	var task mdsproto.RepairTask
	call(mdsproto.OpRepairClaim, req, &task)
	if task.Inode.Ino != fi.Ino {
		t.Fatalf("claim gave %q of ino %d, want ino %d", task.Kind, task.Inode.Ino, fi.Ino)
	}
	return c, cl
}

// healUntilClean runs another healer until /f is clean (and, with
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
			t.Fatalf("%v (simulated) after the healer holding the claim died: active %d, dirty %v (%v)", within, active, dirty, ferr)
		}
		<-time.After(10 * time.Second) // simulated time: the cluster's clocks move on
	}
}

// The leader's own healer claims a repair, and the leader dies: the next
// leader never handed that claim out, but the repair lock names the
// healer's process, which is not among the processes active now. The
// claim is dead, and another healer repairs the file within a minute.
func TestClaimOfADeadLeadersHealerEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, cl := claimAndDie(t, 3, mdsproto.RepairClaimReq{Worker: "mds0-healer/0", Process: "mds0"})
		c.KillMDS(0) // the leader, and its healer with it
		healUntilClean(t, cl, time.Minute, false)
	})
}
