package mds_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// The capability key rotates with no downtime: handles open across the
// rotation keep reading, new capabilities carry the new key, a
// capability of the old key works until the old key retires and not
// after, and a restarted MDS or OSD keeps the ring.
func TestCapabilityKeyRotation(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, DefaultLayout: "ec:2+1", Auth: true, KeyRetireAfter: time.Second})
	cl := c.Dial()
	data := bytes.Repeat([]byte("rotated "), 100_000)
	write := func(p string) {
		t.Helper()
		f, err := cl.Create(ctx, p, braid.CreateOptions{})
		if err == nil {
			_, err = f.WriteAt(data, 0)
		}
		if err == nil {
			err = f.Close()
		}
		if err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	readAll := func(f *braid.File) error {
		got := make([]byte, len(data))
		if _, err := f.ReadAt(got, 0); err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return errors.New("different bytes")
		}
		return nil
	}
	write("/before")
	held, err := cl.Open(ctx, "/before")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	fi, err := cl.Stat(ctx, "/before")
	if err != nil {
		t.Fatal(err)
	}
	osd0, err := wire.Dial(ctx, c.OSDs[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer osd0.Close()
	old := c.Key.Issue(fi.Ino, capability.Read, fi.Layout.Version, time.Now().Add(time.Hour))
	stat := func(cp capability.Cap) error {
		_, _, err := osd0.Call(ctx, osdproto.OpStat, (&osdproto.Req{Cap: cp, Ino: fi.Ino}).Encode(osdproto.OpStat), nil, nil)
		return err
	}
	if err := stat(old); err != nil {
		t.Fatalf("a capability of the first key: %v", err)
	}

	id, retire, err := cl.RotateKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id == 0 || retire.Before(time.Now()) {
		t.Fatalf("rotation: key %d, old keys retire at %v", id, retire)
	}
	write("/after")
	r, err := cl.Open(ctx, "/after")
	if err != nil {
		t.Fatal(err)
	}
	if err := readAll(r); err != nil {
		t.Fatalf("read with a new key's capability: %v", err)
	}
	r.Close()
	testcluster.Eventually(t, 20*time.Second, func() bool { return errors.Is(stat(old), wire.ErrDenied) },
		func() string { return fmt.Sprintf("a capability of the retired key: %v", stat(old)) })
	if err := readAll(held); err != nil {
		t.Fatalf("a handle opened before the rotation, after the old key retired: %v", err)
	}

	// The ring outlives restarts of the MDS and of an OSD (which starts
	// from its key file, then takes the ring from its first heartbeat).
	c.RestartMDS()
	c.RestartOSD(1)
	c.WaitUp(3)
	testcluster.Eventually(t, 20*time.Second, func() bool {
		r, err := cl.Open(ctx, "/after")
		if err != nil {
			return false
		}
		defer r.Close()
		return readAll(r) == nil
	}, func() string { return "reading after restarts" })
	if err := stat(old); !errors.Is(err, wire.ErrDenied) {
		t.Fatalf("the retired key after restarts: %v", err)
	}
}
