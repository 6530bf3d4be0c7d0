package mds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
)

// TestNewInodesCarryTheirSlot: files, symlinks and special nodes are
// born in their directory's slot; directories in their parent's, or with
// switching, in the slot their parent and name hash to.
func TestNewInodesCarryTheirSlot(t *testing.T) {
	for _, switchProb := range []float64{0, 1} {
		t.Run(fmt.Sprint("switch=", switchProb), func(t *testing.T) {
			key := testKey(t)
			s, err := Start(context.Background(), Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: key, MkdirSwitch: switchProb})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			do := func(op uint16, req any, out any) {
				t.Helper()
				if err := handleOp(t, s, op, req, out); err != nil {
					t.Fatalf("op %d: %v", op, err)
				}
			}
			for i := range 3 {
				hb := mdsproto.HeartbeatReq{UUID: fmt.Sprintf("osd-%d", i), Addr: fmt.Sprintf("127.0.0.1:%d", 1+i), CapacityBytes: 1 << 40, FreeBytes: 1 << 40, TimeNs: time.Now().UnixNano()}
				hb.Sig = key.Sign("heartbeat", hb.SignedBytes())
				do(mdsproto.OpHeartbeat, hb, nil)
			}
			var a, b mdsproto.Inode
			do(mdsproto.OpMkdir, mdsproto.MkdirReq{Path: "/a", Mode: 0o755}, &a)
			do(mdsproto.OpMkdir, mdsproto.MkdirReq{Path: "/a/b", Mode: 0o755, Parents: true}, &b)
			dirs := []struct {
				in     mdsproto.Inode
				parent uint64
				name   string
			}{{a, rootIno, "a"}, {b, a.Ino, "b"}}
			for _, d := range dirs {
				want := slotOf(d.parent)
				if switchProb == 1 {
					want = newDirSlot(d.parent, d.name, 1, 0)
				}
				if got := slotOf(d.in.Ino); got != want {
					t.Errorf("directory %s (ino %#x) is in slot %d, want %d", d.name, d.in.Ino, got, want)
				}
			}
			var f mdsproto.OpenResp
			do(mdsproto.OpCreate, mdsproto.CreateReq{Path: "/a/b/f", Mode: 0o644, SizeHint: 0}, &f)
			var l, p mdsproto.Inode
			do(mdsproto.OpSymlink, mdsproto.SymlinkReq{Dir: b.Ino, Name: "l", Target: "f"}, &l)
			do(mdsproto.OpMknod, mdsproto.MknodReq{Dir: b.Ino, Name: "p", Type: mdsproto.TypeFIFO, Mode: 0o644}, &p)
			for name, ino := range map[string]uint64{"file": f.Inode.Ino, "symlink": l.Ino, "fifo": p.Ino} {
				if slotOf(ino) != slotOf(b.Ino) {
					t.Errorf("%s %#x is in slot %d, its directory %#x in %d", name, ino, slotOf(ino), b.Ino, slotOf(b.Ino))
				}
			}
		})
	}
}

// TestDirSlotSwitching: switching moves about the probability asked of
// new directories, to slots spread over all of them.
func TestDirSlotSwitching(t *testing.T) {
	const n = 20000
	switched := 0
	seen := map[uint32]bool{}
	for i := range n {
		u := float64(i) / n // evenly over [0, 1)
		slot := newDirSlot(rootIno, fmt.Sprint("d", i), 0.25, u)
		if slot != slotOf(rootIno) || u < 0.25 {
			if u >= 0.25 {
				t.Fatalf("draw %v above the probability switched to slot %d", u, slot)
			}
			switched++
			seen[slot] = true
		}
	}
	if switched != n/4 {
		t.Errorf("%d of %d switched, want %d", switched, n, n/4)
	}
	if len(seen) < slotCount*9/10 {
		t.Errorf("switched directories went to %d slots of %d", len(seen), slotCount)
	}
	if _, err := inoInSlot(maxInoHigh+1, 0); err == nil {
		t.Error("a counter past the slot bits gave an inode number")
	}
}
