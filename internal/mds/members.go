package mds

import (
	"context"
	"encoding/binary"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// OSD membership: heartbeats (an OSD's address, capacity and failure
// domains, and the capability keys it holds), the id each OSD's uuid is
// given, the principal each OSD is bound to, drain and removal. What the
// heartbeats say feeds the cluster map (cluster.go, internal/core/cluster).

// osdMembers admits OSDs to the cluster and keeps their records.
type osdMembers struct {
	kv      kv.Engine
	cfg     *Config
	cluster *clusterMap
	keys    *keyRing  // heartbeats' signatures; the keys each OSD holds
	owners  osdOwners // which principal each OSD is (authz.go)
	shell   membersShell
}

// membersShell is what OSD membership asks of the rest of the MDS.
type membersShell interface {
	multi() bool
	// publishOSDMap stores the cluster map for the other active MDS
	// processes (multi.go).
	publishOSDMap(ctx context.Context) error
}

func (m *osdMembers) heartbeat(ctx context.Context, hb mdsproto.HeartbeatReq) (mdsproto.HeartbeatResp, error) {
	if _, authed := principal(ctx); !authed && !m.keys.ring.VerifySignature("heartbeat", hb.SignedBytes(), hb.Sig) {
		return mdsproto.HeartbeatResp{}, wire.Errorf(wire.ErrDenied, "heartbeat signature invalid")
	}
	now := m.cfg.Now()
	if d := now.Sub(time.Unix(0, hb.TimeNs)); d > heartbeatSkew || d < -heartbeatSkew {
		return mdsproto.HeartbeatResp{}, wire.Errorf(wire.ErrDenied, "heartbeat time %v off", d)
	}
	if hb.UUID == "" || len(hb.UUID) > 64 || hb.Addr == "" || len(hb.Addr) > 256 {
		return mdsproto.HeartbeatResp{}, wire.Errorf(wire.ErrBadRequest, "heartbeat without uuid or address")
	}
	if len(hb.Disk) > maxDiskNameBytes || hb.DiskBytes < 0 || hb.DiskFreeBytes < 0 {
		return mdsproto.HeartbeatResp{}, wire.Errorf(wire.ErrBadRequest, "heartbeat with a disk name of %d bytes, or negative disk sizes", len(hb.Disk))
	}
	if !validDomain(hb.Host) || !validDomain(hb.Rack) {
		return mdsproto.HeartbeatResp{}, wire.Errorf(wire.ErrBadRequest, "heartbeat with a host or rack name over %d bytes or with control characters", mdsproto.MaxDomainBytes)
	}
	if err := m.bindOSD(ctx, hb.UUID); err != nil {
		return mdsproto.HeartbeatResp{}, err
	}
	rec, err := m.osdIdentity(ctx, hb)
	if err != nil {
		return mdsproto.HeartbeatResp{}, err
	}
	if m.cluster.beat(rec, hb, now) {
		if err := m.kv.Update(ctx, func(tx kv.Txn) error { return putRecord(tx, osdKey(rec.ID), &rec) }); err != nil {
			return mdsproto.HeartbeatResp{}, err
		}
		m.cfg.Log.Info("osd registered", "id", rec.ID, "addr", rec.Addr)
		if m.shell.multi() {
			_ = m.shell.publishOSDMap(ctx) // the others place on it at once (else the next route pass does)
		}
	}
	keys, cur := m.keys.heard(rec.ID, hb.KeysHeld)
	return mdsproto.HeartbeatResp{ID: rec.ID, Keys: keys, KeyCurrent: cur}, nil
}

// osdIdentity maps an OSD's uuid to its id, allocating one on first sight.
// Known OSDs are answered from memory, so a heartbeat costs no store access.
func (m *osdMembers) osdIdentity(ctx context.Context, hb mdsproto.HeartbeatReq) (osdRec, error) {
	rec := osdRec{Format: recFormat, UUID: hb.UUID, Addr: hb.Addr}
	if id, ok := m.cluster.idOf(hb.UUID); ok {
		rec.ID = id
		return rec, nil
	}
	err := m.kv.Update(ctx, func(tx kv.Txn) error {
		b, err := tx.Get(uuidKey(hb.UUID))
		if err != nil {
			return err
		}
		if len(b) == 4 {
			rec.ID = binary.BigEndian.Uint32(b)
			return nil
		}
		// An OSD that already has an id (the MDS's store was lost and is
		// being rebuilt) keeps it if no other OSD holds it: file layouts
		// in its objects' labels name OSDs by id.
		if hb.ID != 0 {
			taken, err := tx.Get(osdKey(hb.ID))
			if err != nil {
				return err
			}
			if taken == nil {
				rec.ID = hb.ID
				if err := raiseCounter(tx, keyNextOSD, uint64(hb.ID)+1); err != nil {
					return err
				}
				return tx.Put(uuidKey(hb.UUID), binary.BigEndian.AppendUint32(nil, rec.ID))
			}
		}
		n, err := nextCounter(tx, keyNextOSD, 1)
		if err != nil {
			return err
		}
		rec.ID = uint32(n)
		return tx.Put(uuidKey(hb.UUID), binary.BigEndian.AppendUint32(nil, rec.ID))
	})
	return rec, err
}

// drain marks an OSD for draining (or stops a drain).
func (m *osdMembers) drain(ctx context.Context, req mdsproto.DrainReq) (struct{}, error) {
	rec, ok := m.cluster.setDrain(req.ID, !req.Undo)
	if !ok {
		return struct{}{}, wire.Errorf(wire.ErrNotFound, "no OSD %d", req.ID)
	}
	return struct{}{}, m.kv.Update(ctx, func(tx kv.Txn) error { return putRecord(tx, osdKey(rec.ID), &rec) })
}

// removeOSD forgets an OSD that is not up and holds no component of any
// file (a drained one, or one whose data was rebuilt elsewhere).
func (m *osdMembers) removeOSD(ctx context.Context, req mdsproto.DrainReq) (struct{}, error) {
	now := m.cfg.Now()
	v, ok := m.cluster.views(now)[req.ID]
	if !ok {
		return struct{}{}, wire.Errorf(wire.ErrNotFound, "no OSD %d", req.ID)
	}
	if v.State == mdsproto.StateUp {
		return struct{}{}, wire.Errorf(wire.ErrBusy, "OSD %d is up; stop it first", req.ID)
	}
	var holds int64
	var ferr error
	err := m.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan(firstKey(pInode), pastKeys(pInode), func(k, val []byte) bool {
			var rec inodeRec
			if ferr = decodeRecord(val, &rec); ferr != nil {
				return false // an inode that cannot be read may hold the OSD: refuse
			}
			if rec.Layout != nil && slices.Contains(rec.Layout.OSDs, req.ID) {
				holds++
			}
			return holds == 0
		})
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return struct{}{}, err
	}
	if holds > 0 {
		return struct{}{}, wire.Errorf(wire.ErrNotEmpty, "OSD %d still holds components; drain it or wait for the rebuild", req.ID)
	}
	m.cluster.forget(req.ID)
	return struct{}{}, m.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(osdKey(req.ID)) })
}

// bindOSD checks that the OSD uuid is the requester's, binding it on
// first sight.
func (m *osdMembers) bindOSD(ctx context.Context, uuid string) error {
	p, ok := principal(ctx)
	if !ok {
		return nil
	}
	m.owners.mu.Lock()
	owner, known := m.owners.m[uuid]
	m.owners.mu.Unlock()
	if !known {
		err := m.kv.Update(ctx, func(tx kv.Txn) error {
			b, err := tx.Get(osdOwnerKey(uuid))
			if err != nil || b != nil {
				owner = string(b)
				return err
			}
			owner = p.Name
			return tx.Put(osdOwnerKey(uuid), []byte(p.Name))
		})
		if err != nil {
			return err
		}
		m.owners.mu.Lock()
		if m.owners.m == nil {
			m.owners.m = map[string]string{}
		}
		if len(m.owners.m) < maxOSDOwnersCached {
			m.owners.m[uuid] = owner
		}
		m.owners.mu.Unlock()
	}
	if owner != p.Name {
		return wire.Errorf(wire.ErrDenied, "OSD %s is %q's; %s may not heartbeat for it", uuid, owner, p)
	}
	return nil
}
