package braid_test

import (
	"fmt"
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
// and their objects deleted testcluster.DeleteDelay later; the test
// polls with deadlines, which synctest makes exact.
func TestClientCloseDeliversALeaseRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := simnet.New()
		c := testcluster.Start(t, testcluster.Options{OSDs: 3, Network: nw})
		w := c.Dial()
		// For its first lease the MDS takes every file for held (leases
		// held before a restart come back with their renewals): a file
		// removed then keeps its objects until that lease is over.
		put(t, w, "/warm", "ec:2+1", make([]byte, 100<<10))
		if err := w.Remove(ctx, "/warm"); err != nil {
			t.Fatal(err)
		}
		testcluster.Eventually(t, 10*time.Second, func() bool { return c.ObjectFiles() == 0 },
			func() string { return "a removed file nobody holds kept its objects" })
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
		// Gone well before the reader's lease (1 s) would have run out,
		// had its release been lost.
		within := testcluster.DeleteDelay + 300*time.Millisecond
		testcluster.Eventually(t, within, func() bool { return c.ObjectFiles() == 0 },
			func() string {
				return fmt.Sprintf("%d object files of a removed file left after its last reader closed: the lease release was lost", c.ObjectFiles())
			})
	})
}
