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
		ctx := context.Background()
		nw := simnet.New()
		c := testcluster.Start(t, testcluster.Options{OSDs: 4, Healers: -1, Network: nw, OSDFS: simdisk.New(0)})
		cl := c.Dial()
		writeSmall(t, cl, "/f")
		fi, err := cl.Stat(ctx, "/f")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := wire.DialOn(ctx, nw, c.MDS.Addr())
		if err != nil {
			t.Fatal(err)
		}
		call := rawCaller(t, conn)
		call(mdsproto.OpMarkDirty, mdsproto.MarkDirtyReq{Ino: fi.Ino, Comps: []uint32{1}}, nil)
		var task mdsproto.RepairTask
		call(mdsproto.OpRepairClaim, mdsproto.RepairClaimReq{Worker: "doomed"}, &task)
		if task.Inode.Ino != fi.Ino {
			t.Fatalf("claim gave %q of ino %d, want ino %d", task.Kind, task.Inode.Ino, fi.Ino)
		}
		conn.Close() // the healer dies holding the claim

		hctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cl.Heal(hctx, braid.HealOptions{Name: "survivor", Poll: time.Second}) }()
		defer func() { stop(); <-done }()
		deadline := time.Now().Add(30 * time.Minute) // simulated
		for {
			st, err := cl.Status(ctx)
			fi, ferr := cl.Stat(ctx, "/f")
			dirty := ferr != nil || fi.Layout.Components[0].Dirty || fi.Layout.Components[1].Dirty
			if err == nil && !dirty && st.Repair.Active == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("30 simulated minutes after a healer died holding its claim: active %d, dirty %v (%v %v)", st.Repair.Active, dirty, err, ferr)
			}
			<-time.After(10 * time.Second)
		}
		r, err := cl.Open(ctx, "/f")
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
