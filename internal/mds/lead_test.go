package mds

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// TestNoAnswersPastTheLead: an MDS whose lead it can no longer vouch for
// (Config.LeadUntil passed) answers nothing, the extent locks and lock
// renewals above all, whose safety rests on a successor's grace.
func TestNoAnswersPastTheLead(t *testing.T) {
	var until atomic.Int64
	until.Store(time.Now().Add(time.Hour).UnixNano())
	s, err := Start(context.Background(), Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: testKey(t),
		LeadUntil: func() time.Time { return time.Unix(0, until.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	do := func(op uint16, req any) error { t.Helper(); return handleOp(t, s, op, req, nil) }
	if err := do(mdsproto.OpMkdir, mdsproto.MkdirReq{Path: "/d", Mode: 0o755}); err != nil {
		t.Fatalf("while leading: %v", err)
	}
	until.Store(time.Now().Add(-time.Millisecond).UnixNano())
	for _, tc := range []struct {
		op  uint16
		req any
	}{
		{mdsproto.OpLockWait, mdsproto.LockWaitReq{Session: 1}},
		{mdsproto.OpExtentLock, mdsproto.ExtentReq{Ino: 2, Session: 1, Handle: 1, Lo: 0, Hi: 1}},
		{mdsproto.OpLookup, mdsproto.PathReq{Path: "/d"}},
	} {
		if err := do(tc.op, tc.req); !errors.Is(err, wire.ErrNotLeader) {
			t.Errorf("op %d past the lead: %v, want ErrNotLeader", tc.op, err)
		}
	}
}
