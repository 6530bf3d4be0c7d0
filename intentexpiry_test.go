package braid_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/simdisk"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// An intent that expired can no longer be committed: the MDS's resolver
// takes it from then on and rolls a prepared one back, aborting its
// stages on the OSDs before it removes the record. A commit that slipped
// in meanwhile was accepted, and its writer then took the OSDs' "no such
// stage" for "the resolver applied it": a write acknowledged and never
// made. Here the OSDs answer slowly, so the resolver is still waiting
// for their answers to its aborts when the late commit comes (simulated
// time: the cluster's intents live 2 s).
func TestExpiredIntentCannotBeCommitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw, disk := simnet.New(), simdisk.New(0)
		var aborts atomic.Int32 // the resolver's aborts of txid 99 an OSD ran
		disk.Fault = func(op osd.FaultOp, p string) error {
			if op == osd.FaultRemove && strings.HasSuffix(p, fmt.Sprintf(".%016x.stg", 99)) {
				aborts.Add(1)
			}
			return nil
		}
		c := testcluster.Start(t, testcluster.Options{OSDs: 3, Network: nw, OSDFS: disk})
		put(t, c.Dial(), "/f", "ec:2+1", make([]byte, 100<<10))
		fi, err := c.Dial().Stat(ctx, "/f")
		if err != nil {
			t.Fatal(err)
		}
		raw, err := wire.DialOn(ctx, nw, c.MDS.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		call := func(op uint16, req any) error {
			b, _ := mdsproto.Marshal(req)
			_, _, err := raw.Call(ctx, op, b, nil, nil)
			return err
		}
		in := mdsproto.IntentReq{Ino: fi.Ino, Txid: 99, Version: fi.Layout.Version, Comps: []uint32{0, 1, 2}}
		if err := call(mdsproto.OpIntentBegin, in); err != nil {
			t.Fatal(err)
		}
		for _, o := range c.OSDs {
			nw.Delay(o.Addr(), time.Second)
		}
		testcluster.Eventually(t, 10*time.Second, func() bool { return aborts.Load() > 0 },
			func() string { return "the expired intent was never rolled back" })
		// An OSD ran the abort; its answer is still a second away.
		err = call(mdsproto.OpIntentCommit, mdsproto.IntentReq{Ino: in.Ino, Txid: in.Txid})
		if !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("commit of an expired intent: %v, want refused (ErrNotFound)", err)
		}
		for _, o := range c.OSDs {
			nw.Delay(o.Addr(), 0)
		}
	})
}
