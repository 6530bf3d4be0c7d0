package mds

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/core/route"
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
				want := route.SlotOf(d.parent)
				if switchProb == 1 {
					want = route.NewDirSlot(d.parent, d.name, 1, 0)
				}
				if got := route.SlotOf(d.in.Ino); got != want {
					t.Errorf("directory %s (ino %#x) is in slot %d, want %d", d.name, d.in.Ino, got, want)
				}
			}
			var f mdsproto.OpenResp
			do(mdsproto.OpCreate, mdsproto.CreateReq{Path: "/a/b/f", Mode: 0o644, SizeHint: 0}, &f)
			var l, p mdsproto.Inode
			do(mdsproto.OpSymlink, mdsproto.SymlinkReq{Dir: b.Ino, Name: "l", Target: "f"}, &l)
			do(mdsproto.OpMknod, mdsproto.MknodReq{Dir: b.Ino, Name: "p", Type: mdsproto.TypeFIFO, Mode: 0o644}, &p)
			for name, ino := range map[string]uint64{"file": f.Inode.Ino, "symlink": l.Ino, "fifo": p.Ino} {
				if route.SlotOf(ino) != route.SlotOf(b.Ino) {
					t.Errorf("%s %#x is in slot %d, its directory %#x in %d", name, ino, route.SlotOf(ino), b.Ino, route.SlotOf(b.Ino))
				}
			}
		})
	}
}
