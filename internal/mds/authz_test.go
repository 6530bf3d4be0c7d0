package mds_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

// An MDS with a credential admits only its CA's principals, and each only
// to what its role may do: the probes of issue 14, as a client.
func TestMDSAdmitsOnlyItsPrincipals(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 3, Auth: true})
	admin := c.Dial()
	as := func(p auth.Principal) *braid.Client {
		cred := c.Issue(p)
		return c.DialWith(func(o *braid.Options) { o.Credential = cred })
	}
	bob := as(auth.Principal{Name: "bob", Role: auth.RoleClient, UIDs: []uint32{1000}, GIDs: []uint32{1000}})
	gw := as(auth.Principal{Name: "s3", Role: auth.RoleGateway, AnyID: true})

	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, braid.ErrDenied) || !strings.Contains(err.Error(), "may not") {
			t.Errorf("%s: %v; want permission denied", what, err)
		}
	}
	denied("client drains an OSD", bob.DrainOSD(ctx, 1, false))
	denied("client removes an OSD", bob.RemoveOSD(ctx, 1))
	_, err := bob.RecoverMetadata(ctx, false)
	denied("client recovers metadata", err)
	_, err = bob.S3UserAdd(ctx, "eve")
	denied("client adds an S3 user", err)
	if err := bob.SetLayout(ctx, "/", "stripe:3"); !errors.Is(err, braid.ErrPerm) && !errors.Is(err, braid.ErrDenied) {
		t.Errorf("client sets the layout of /: %v", err)
	}
	_, err = bob.Scrub(ctx, "/")
	denied("client scrubs the tree", err)

	u, err := admin.S3UserAdd(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	date := time.Now().UTC().Format("20060102")
	_, _, err = admin.S3SigningKey(ctx, u.AccessKey, date, "us-east-1", "s3")
	denied("admin fetches a signing key", err)
	_, _, err = bob.S3SigningKey(ctx, u.AccessKey, date, "us-east-1", "s3")
	denied("client fetches a signing key", err)
	if who, _, err := gw.S3SigningKey(ctx, u.AccessKey, date, "us-east-1", "s3"); err != nil || who.Name != "alice" || who.Uid != u.Uid || u.Uid < mdsproto.FirstS3Uid {
		t.Errorf("gateway's signing key: %+v (added %+v), %v", who, u, err)
	}

	// What a client may do, it does: in a directory of its own.
	if err := admin.Mkdir(ctx, "/bob", false); err != nil {
		t.Fatal(err)
	}
	own(t, admin, "/bob", 1000, 1000, 0o755)
	if err := bob.SetLayout(ctx, "/bob", "stripe:2"); err != nil {
		t.Fatalf("client's own directory's layout: %v", err)
	}
	data := bytes.Repeat([]byte("mine "), 10_000)
	testcluster.WriteFile(t, bob, "/bob/f", braid.CreateOptions{}, data)
	fi, err := bob.Stat(ctx, "/bob/f")
	if err != nil {
		t.Fatal(err)
	}

	// A dirty mark from someone who is not writing the file is refused
	// (one MarkDirty on three components made an ec:4+2 file unreadable).
	conn, err := wire.DialOn(ctx, auth.Network(nil, c.Issue(auth.Principal{Name: "raw", Role: auth.RoleClient}), auth.RoleMDS), c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := mdsproto.Marshal(mdsproto.MarkDirtyReq{Ino: fi.Ino, Comps: []uint32{0, 1}})
	_, _, err = conn.Call(ctx, mdsproto.OpMarkDirty, body, nil, nil)
	if !errors.Is(err, wire.ErrDenied) {
		t.Errorf("a stranger's dirty mark: %v", err)
	}
	body, _ = mdsproto.Marshal(mdsproto.MarkDirtyReq{Ino: fi.Ino, Comps: []uint32{0}, Lost: true, ObjectLen: -1})
	if _, _, err = conn.Call(ctx, mdsproto.OpMarkDirty, body, nil, nil); !errors.Is(err, wire.ErrDenied) {
		t.Errorf("a stranger's lost mark: %v", err)
	}
	got := make([]byte, len(data))
	r, err := admin.Open(ctx, "/bob/f")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after refused marks: %v", err)
	}

	// Without a credential of this cluster, nothing at all.
	if _, err := wire.Dial(ctx, c.MDS.Addr()); err == nil {
		t.Error("a plain connection got a welcome")
	}
	other, err := auth.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	eve, err := other.Issue(auth.Principal{Name: "eve", Role: auth.RoleAdmin, AnyID: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	opts := braid.DefaultOptions
	opts.Credential = eve
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if cl, err := braid.DialOptions(dctx, c.MDS.Addr(), opts); err == nil {
		cl.Close()
		t.Error("another cluster's administrator was admitted")
	} else if !errors.Is(err, braid.ErrDenied) {
		t.Errorf("another cluster's administrator: %v; want permission denied", err)
	}
}

// An OSD's credential heartbeats for its own OSD only: the first
// principal to register an OSD owns it.
func TestOSDHeartbeatsOnlyForItself(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.Options{OSDs: 1, Auth: true})
	st, err := c.Dial().Status(ctx)
	if err != nil || len(st.OSDs) != 1 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	uuid := c.OSDs[0].UUID()
	thief := c.Issue(auth.Principal{Name: "osd9", Role: auth.RoleOSD})
	conn, err := wire.DialOn(ctx, auth.Network(nil, thief, auth.RoleMDS), c.MDS.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hb := mdsproto.HeartbeatReq{UUID: uuid, ID: st.OSDs[0].ID, Addr: "127.0.0.1:1", TimeNs: time.Now().UnixNano()}
	hb.Sig = c.Key.Sign("heartbeat", hb.SignedBytes())
	body, _ := mdsproto.Marshal(hb)
	if _, _, err := conn.Call(ctx, mdsproto.OpHeartbeat, body, nil, nil); !errors.Is(err, wire.ErrDenied) {
		t.Fatalf("another OSD's heartbeat for osd0: %v", err)
	}
	hb.UUID = "a-new-osd-of-osd9"
	hb.ID = 0
	hb.Sig = c.Key.Sign("heartbeat", hb.SignedBytes())
	body, _ = mdsproto.Marshal(hb)
	if _, _, err := conn.Call(ctx, mdsproto.OpHeartbeat, body, nil, nil); err != nil {
		t.Fatalf("osd9 registering its own OSD: %v", err)
	}
}

// own makes p's owner uid:gid and its mode mode, as the administrator.
func own(t *testing.T, admin *braid.Client, p string, uid, gid, mode uint32) {
	t.Helper()
	fi, err := admin.Stat(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetAttr(context.Background(), braid.SetAttrRequest{Ino: fi.Ino, Uid: &uid, Gid: &gid, Mode: &mode}); err != nil {
		t.Fatal(err)
	}
}
