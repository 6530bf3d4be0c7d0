package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
	"golang.org/x/sys/unix"
)

// openFDs is how many descriptors process pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// About 20k idle connections made an MDS or an OSD deaf for good: the
// accept loop ended on EMFILE (20,000 descriptors here). The servers here
// get 512 descriptors, fewer than they would keep connections (1,024 from one address), so the flood
// meets EMFILE as well as the connection bound: 2,000 idle sockets at
// each cost real clients nothing, and the servers let go of them when
// they close.
func TestIdleSocketFloodAtRealServers(t *testing.T) {
	c := StartCluster(t, 3)
	cl := c.Client()
	ctx := context.Background()
	data := bytes.Repeat([]byte("through the flood "), 100_000)
	put := func(name string) {
		t.Helper()
		f, err := cl.Create(ctx, name, braid.CreateOptions{Layout: "ec:2+1"})
		if err == nil {
			_, err = f.WriteAt(data, 0)
		}
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := make([]byte, len(data))
		r, err := cl.Open(ctx, name)
		if err == nil {
			_, err = r.ReadAt(got, 0)
			r.Close()
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s read back: %v", name, err)
		}
	}
	put("/before")
	for _, p := range []*Proc{c.MDS, c.OSDs[0]} {
		lim := unix.Rlimit{Cur: 512, Max: 512}
		if err := unix.Prlimit(p.cmd.Process.Pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
			t.Fatal(err)
		}
	}
	procs := append([]*Proc{c.MDS}, c.OSDs...)
	base := map[*Proc]int{}
	for _, p := range procs {
		base[p] = openFDs(t, p.cmd.Process.Pid)
	}
	var flood []net.Conn
	defer func() {
		for _, conn := range flood {
			conn.Close()
		}
	}()
	for _, p := range []*Proc{c.MDS, c.OSDs[0]} {
		for i := 0; i < 2000; i++ {
			conn, err := net.Dial("tcp", p.Addr)
			if err != nil {
				t.Fatalf("flood socket %d to %s: %v", i, p.Name, err)
			}
			flood = append(flood, conn)
		}
	}
	// A new client and the one from before both work.
	put("/during")
	fresh := c.Client()
	if _, err := fresh.Stat(ctx, "/during"); err != nil {
		t.Fatalf("a new client during the flood: %v", err)
	}
	for _, conn := range flood {
		conn.Close()
	}
	flood = nil
	for _, p := range procs {
		testcluster.Eventually(t, 30*time.Second, func() bool { return openFDs(t, p.cmd.Process.Pid) <= base[p]+8 },
			func() string {
				return fmt.Sprintf("%s holds %d descriptors, %d before the flood", p.Name, openFDs(t, p.cmd.Process.Pid), base[p])
			})
	}
	put("/after")
}
