package braid_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/braidfs/braid/internal/simnet"
	"github.com/braidfs/braid/internal/testcluster"
)

// A reader that closes its file and at once its client still releases
// its lease: the release goes behind the file's Close, and the client's
// Close waits for it (for a grace, then cuts it short) instead of
// cutting it off. So a removed file's objects go once its last reader is
// done, not a lease later, and nothing a client started outlives it.
// Simulated time: leases here last 1 s, orphans are reaped every 100 ms
// and their objects deleted testcluster.DeleteDelay later.
func TestClientCloseDeliversALeaseRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := simnet.New()
		c := testcluster.Start(t, testcluster.Options{OSDs: 3, Network: nw})
		// Past the MDS's first lease, while it takes every file for held
		// (leases held before a restart come back with their renewals).
		time.Sleep(time.Second)
		w := c.Dial()
		put(t, w, "/f", "ec:2+1", make([]byte, 100<<10))
		r := c.Dial()
		f, err := r.Open(ctx, "/f")
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Remove(ctx, "/f"); err != nil {
			t.Fatal(err)
		}
		if n := c.ObjectFiles(); n != 3 {
			t.Fatalf("%d object files while a reader holds the removed file, want 3", n)
		}
		// A slow link to the MDS: the release is still on its way when
		// the client closes.
		nw.Delay(c.MDS.Addr(), 50*time.Millisecond)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		// Simulated time moves to before the reader's lease would have
		// run out, had its release been lost.
		time.Sleep(testcluster.DeleteDelay + 300*time.Millisecond)
		synctest.Wait()
		if n := c.ObjectFiles(); n != 0 {
			t.Fatalf("%d object files of a removed file left %v after its last reader closed: the lease release was lost",
				n, testcluster.DeleteDelay+300*time.Millisecond)
		}
	})
}
