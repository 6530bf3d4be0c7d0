package mds

import (
	"context"
	"errors"
	"testing"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Below its disk's reserve the MDS refuses what adds to the namespace,
// with ENOSPC, and goes on removing: space comes back that way.
func TestNearlyFullDiskRefusesNewNames(t *testing.T) {
	ctx := context.Background()
	key, err := capability.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	do := func(s *Server, op uint16, req any) error { t.Helper(); return handleOp(t, s, op, req, nil) }
	s, err := Start(ctx, Config{Dir: dir, Listen: "127.0.0.1:0", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := do(s, mdsproto.OpMkdir, mdsproto.MkdirReq{Path: "/d", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	named := mdsproto.MkdirReq{Once: mdsproto.Once{Session: 3, Seq: 1}, Path: "/named", Mode: 0o755}
	var first mdsproto.Inode
	if err := handleOp(t, s, mdsproto.OpMkdir, named, &first); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Start(ctx, Config{Dir: dir, Listen: "127.0.0.1:0", Key: key, MinFreeBytes: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		op  uint16
		req any
	}{
		{mdsproto.OpMkdir, mdsproto.MkdirReq{Path: "/e", Mode: 0o755}},
		{mdsproto.OpCreate, mdsproto.CreateReq{Path: "/f", Mode: 0o644}},
		{mdsproto.OpSymlink, mdsproto.SymlinkReq{Dir: rootIno, Name: "l", Target: "x"}},
	} {
		if err := do(s, tc.op, tc.req); !errors.Is(err, wire.ErrNoSpace) {
			t.Errorf("op %d on a nearly full disk: %v, want ENOSPC", tc.op, err)
		}
	}
	// A retry of a mutation applied before the disk filled gets the
	// answer its first attempt got; a new one is refused.
	var again mdsproto.Inode
	if err := handleOp(t, s, mdsproto.OpMkdir, named, &again); err != nil || again.Ino != first.Ino {
		t.Errorf("a retried mkdir on a nearly full disk: inode %d, %v; want %d", again.Ino, err, first.Ino)
	}
	named.Seq, named.Path = 2, "/named2"
	if err := do(s, mdsproto.OpMkdir, named); !errors.Is(err, wire.ErrNoSpace) {
		t.Errorf("a new named mkdir on a nearly full disk: %v, want ENOSPC", err)
	}
	if err := do(s, mdsproto.OpRemove, mdsproto.PathReq{Path: "/d"}); err != nil {
		t.Fatalf("remove on a nearly full disk: %v", err)
	}
}
