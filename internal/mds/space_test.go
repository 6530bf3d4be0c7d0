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
	if err := do(s, mdsproto.OpRemove, mdsproto.PathReq{Path: "/d"}); err != nil {
		t.Fatalf("remove on a nearly full disk: %v", err)
	}
}
