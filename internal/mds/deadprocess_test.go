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

// A healer running in one of several MDS processes claims a repair from
// the leader, and its process dies. The leader finds the process gone
// once its session lapses and ends the claim then: another healer
// repairs the file within a minute, not after the ten-minute repair
// lease (as TestDeadHealersClaimExpires, a healer of its own, must wait).
func TestClaimOfADeadProcessEndsWithIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		nw := simnet.New()
		c := testcluster.Start(t, testcluster.Options{OSDs: 4, Healers: -1, Network: nw, OSDFS: simdisk.New(0), MDSCount: 2})
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
		call := rawCaller(t, conn)
		call(mdsproto.OpMarkDirty, mdsproto.MarkDirtyReq{Ino: fi.Ino, Comps: []uint32{1}}, nil)
		var task mdsproto.RepairTask
		call(mdsproto.OpRepairClaim, mdsproto.RepairClaimReq{Worker: "mds1-healer/0", Process: "mds1"}, &task)
		if task.Inode.Ino != fi.Ino {
			t.Fatalf("claim gave %q of ino %d, want ino %d", task.Kind, task.Inode.Ino, fi.Ino)
		}
		conn.Close()
		killed := time.Now()
		c.KillMDS(1) // the healer's process dies with it

		hctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cl.Heal(hctx, braid.HealOptions{Name: "survivor", Poll: time.Second}) }()
		defer func() { stop(); <-done }()
		deadline := killed.Add(time.Minute) // simulated; the lease is ten
		for {
			fi, ferr := cl.Stat(ctx, "/f")
			if ferr == nil && !fi.Layout.Components[0].Dirty && !fi.Layout.Components[1].Dirty {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a minute after the process of the healer holding the claim died, /f is still dirty (%v)", ferr)
			}
			<-time.After(time.Second) // simulated time: the cluster's clocks move on
		}
	})
}
