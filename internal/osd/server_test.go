package osd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

func TestCapabilityRejections(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 1})
	conn, err := wire.Dial(context.Background(), c.OSDs[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	now := time.Now()
	call := func(op uint16, r osdproto.Req, data, out []byte) error {
		_, _, err := conn.Call(ctx, op, r.Encode(op), data, out)
		return err
	}
	good := c.Key.Issue(42, capability.Read|capability.Write, 3, now.Add(time.Minute))
	if err := call(osdproto.OpWrite, osdproto.Req{Cap: good, Ino: 42, Comp: 0}, []byte("payload"), nil); err != nil {
		t.Fatalf("valid write refused: %v", err)
	}
	otherKey, _ := capability.NewKey()
	readOnly := c.Key.Issue(42, capability.Read, 3, now.Add(time.Minute))
	tampered := readOnly
	tampered.Rights = capability.Read | capability.Write
	for _, tc := range []struct {
		name string
		op   uint16
		req  osdproto.Req
		want error
	}{
		{"forged", osdproto.OpRead, osdproto.Req{Cap: otherKey.Issue(42, capability.Read, 3, now.Add(time.Minute)), Ino: 42, Len: 7}, wire.ErrDenied},
		{"rights raised by client", osdproto.OpWrite, osdproto.Req{Cap: tampered, Ino: 42}, wire.ErrDenied},
		{"expired", osdproto.OpRead, osdproto.Req{Cap: c.Key.Issue(42, capability.Read, 3, now.Add(-time.Second)), Ino: 42, Len: 7}, wire.ErrDenied},
		{"wrong object", osdproto.OpRead, osdproto.Req{Cap: good, Ino: 43, Len: 7}, wire.ErrDenied},
		{"read-only cap writes", osdproto.OpWrite, osdproto.Req{Cap: readOnly, Ino: 42}, wire.ErrDenied},
		{"read-only cap deletes", osdproto.OpDelete, osdproto.Req{Cap: readOnly, Ino: 42, Comps: []uint32{0}}, wire.ErrDenied},
		{"stale version read", osdproto.OpRead, osdproto.Req{Cap: c.Key.Issue(42, capability.Read, 2, now.Add(time.Minute)), Ino: 42, Len: 7}, wire.ErrStale},
		{"stale version write", osdproto.OpWrite, osdproto.Req{Cap: c.Key.Issue(42, capability.Write, 2, now.Add(time.Minute)), Ino: 42}, wire.ErrStale},
	} {
		if err := call(tc.op, tc.req, nil, make([]byte, tc.req.Len)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	out := make([]byte, 7)
	if err := call(osdproto.OpRead, osdproto.Req{Cap: good, Ino: 42, Len: 7}, nil, out); err != nil || string(out) != "payload" {
		t.Fatalf("data after rejected requests: %q %v", out, err)
	}
}

// FuzzHandler sends arbitrary op codes and meta sections to a live OSD:
// every one must get an answer (or a closed connection), never a crash,
// and a stored object must survive them.
func FuzzHandler(f *testing.F) {
	c := testcluster.Start(f, testcluster.Options{OSDs: 1})
	key := c.Key
	good := key.Issue(7, capability.Read|capability.Write, 1, time.Now().Add(time.Hour))
	for op := osdproto.OpWrite; op <= osdproto.OpStat+1; op++ {
		f.Add(op, (&osdproto.Req{Cap: good, Ino: 7, Comps: []uint32{0, 1}, Len: 3}).Encode(op), []byte("abc"))
	}
	f.Add(osdproto.OpRead, (&osdproto.Req{Cap: good, Ino: 7, Len: 1 << 30}).Encode(osdproto.OpRead), []byte{})
	f.Add(osdproto.OpWrite, (&osdproto.Req{Cap: good, Ino: 7, Off: 1 << 62}).Encode(osdproto.OpWrite), []byte("x"))
	conn, err := wire.Dial(context.Background(), c.OSDs[0].Addr())
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := conn.Call(context.Background(), osdproto.OpWrite,
		(&osdproto.Req{Cap: key.Issue(99, capability.Write, 1, time.Now().Add(time.Hour)), Ino: 99, Flags: osdproto.FlagSync}).Encode(osdproto.OpWrite), []byte("keep"), nil); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, op uint16, meta, data []byte) {
		if conn.Err() != nil {
			conn, _ = wire.Dial(context.Background(), c.OSDs[0].Addr())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, _ = conn.Call(ctx, op, meta, data, make([]byte, 1<<16))
		out := make([]byte, 4)
		check, _ := wire.Dial(ctx, c.OSDs[0].Addr())
		defer check.Close()
		keep := key.Issue(99, capability.Read, 1, time.Now().Add(time.Hour))
		if _, _, err := check.Call(ctx, osdproto.OpRead, (&osdproto.Req{Cap: keep, Ino: 99, Len: 4}).Encode(osdproto.OpRead), nil, out); err != nil || string(out) != "keep" {
			t.Fatalf("stored object damaged or OSD down after op %d: %q %v", op, out, err)
		}
	})
}
