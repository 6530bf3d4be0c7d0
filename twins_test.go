package braid_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/simdisk"
	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/testcluster"
)

// A whole cluster on the simulation's twins: every message over the
// in-memory network, every object on the in-memory disk. A partitioned
// OSD is read around and caught up after the partition heals; an object
// lost from the disk is reconstructed and rebuilt.
func TestClusterOnTwins(t *testing.T) {
	nw, disk := simnet.New(), simdisk.New(0)
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Network: nw, OSDFS: disk})
	cl := c.Dial()
	rng := rand.New(rand.NewPCG(51, 52))
	files := map[string][]byte{"/a": randBytes(rng, 2<<20+3), "/b": randBytes(rng, 9000)}
	for p, data := range files {
		put(t, cl, p, "", data)
	}
	fi, comp, id := unitHolding(t, cl, "/a", 0)
	victim := c.OSDs[osdIndex(c, id)].Addr()
	nw.Isolate(victim)
	mustRead(t, cl, "/a", "with the OSD of its first unit partitioned away", files["/a"])
	files["/c"] = randBytes(rng, 1<<20)
	put(t, cl, "/c", "", files["/c"]) // written around the partition
	nw.Heal(victim)
	waitHealthy(t, cl, 30*time.Second)
	checkAll(t, cl, files, "after the partition healed")
	checkConsistent(t, cl, "after the partition healed")

	lost := false
	for _, p := range disk.Files() {
		if strings.HasSuffix(p, fmt.Sprintf("%016x.%d.dat", fi.Ino, comp)) {
			lost = disk.LoseFile(p) && disk.LoseFile(strings.TrimSuffix(p, "dat")+"sum")
		}
	}
	if !lost {
		t.Fatal("test setup: the object to lose is not on the disk twin")
	}
	c.RestartOSD(osdIndex(c, id))
	mustRead(t, cl, "/a", "with an object lost from the disk", files["/a"])
	waitHealthy(t, cl, 30*time.Second)
	checkConsistent(t, cl, "after rebuilding the lost object")
}
