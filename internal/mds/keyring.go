package mds

// Capability keys rotate with no downtime (`braid key rotate`). The MDS
// keeps a ring of keys by id (capability.Ring) and hands it to every OSD
// in heartbeat answers, over their authenticated connections; OSDs
// report which ids they hold. A rotation adds a new key, waits until
// every up OSD holds it, then signs with it; the keys before it retire
// once every capability they signed has expired, and OSDs drop them
// with the next answer. The ring lives in a file of the MDS's directory
// (like the cluster key file it starts from), or, when several MDS
// processes share the metadata store, in the store, sealed under
// filekeys.key (loadRing):
//
//	<dir>/capkeys.json   {"v":1,"current":id,"keys":[{"id","key" (hex),"retire_ns"}]} (0600)
//	s/capkeys            nonce || AES-GCM(the same JSON), additional data "s/capkeys"

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/durable"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

const (
	capKeysFile = "capkeys.json"
	// rolloutWait bounds how long a rotation waits for every up OSD to
	// hold the new key.
	rolloutWait = 30 * time.Second
)

type keyFile struct {
	V       int          `json:"v"`
	Current uint8        `json:"current"`
	Keys    []keyFileKey `json:"keys"`
}

type keyFileKey struct {
	ID       uint8  `json:"id"`
	Key      string `json:"key"`
	RetireNs int64  `json:"retire_ns,omitempty"`
}

// keyRing is the MDS's side of rotation.
type keyRing struct {
	ring     *capability.Ring
	rotating sync.Mutex        // one rotation at a time
	mu       sync.Mutex        // changes to the ring; guards retire and held
	retire   map[uint8]int64   // key id → unix nanoseconds when it goes
	held     map[uint32]uint64 // OSD id → ids it holds (its last heartbeat)
	store    func([]byte) error

	// For rotation and retirement, set once at Start.
	cfg     *Config
	cluster *clusterMap // which OSDs are up, to roll a new key out to
	sights  *sights     // when a retired key's stamped end passes here
}

// loadKeyRing reads the ring (ringBytes; nil: none yet), or starts one
// from the cluster key. store keeps it when it changes.
func loadKeyRing(ringBytes []byte, clusterKey capability.Key, store func([]byte) error) (*keyRing, error) {
	kr := &keyRing{ring: capability.NewRing(clusterKey), retire: map[uint8]int64{}, held: map[uint32]uint64{}, store: store}
	if ringBytes == nil {
		return kr, nil
	}
	if err := kr.adopt(ringBytes); err != nil {
		return nil, err
	}
	return kr, nil
}

// adopt makes the ring the one ringBytes holds: at the start, and, for
// an MDS process that does not lead, as the leader rotates keys.
func (kr *keyRing) adopt(ringBytes []byte) error {
	var f keyFile
	if err := json.Unmarshal(ringBytes, &f); err != nil || f.V != 1 {
		return fmt.Errorf("%s: not a key ring this MDS reads", capKeysFile)
	}
	keys := map[uint8]capability.Key{}
	retire := map[uint8]int64{}
	for _, k := range f.Keys {
		raw, err := hex.DecodeString(k.Key)
		if err != nil {
			return fmt.Errorf("%s: key %d: %w", capKeysFile, k.ID, err)
		}
		keys[k.ID] = raw
		if k.RetireNs != 0 {
			retire[k.ID] = k.RetireNs
		}
	}
	kr.mu.Lock()
	defer kr.mu.Unlock()
	if !kr.ring.Set(keys, f.Current) {
		return fmt.Errorf("%s: the current key %d is not in the ring, or a key is malformed", capKeysFile, f.Current)
	}
	kr.retire = retire
	return nil
}

// keyCapRing is where MDS processes sharing an engine keep the ring,
// sealed under filekeys.key (which they share): a standby taking over
// signs with the keys the OSDs were last handed, rotations included.

// loadRing reads the ring: from the engine when it is shared (taking it
// from DIR/capkeys.json into the engine the first time), else from DIR.
// It returns the ring's bytes (nil: none yet) and where to store them.
func (s *Server) loadRing(ctx context.Context) ([]byte, func([]byte) error, error) {
	path := filepath.Join(s.cfg.Dir, capKeysFile)
	fromFile, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		fromFile, err = nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	toFile := func(b []byte) error { return durable.WriteFile(path, b, 0o600) }
	if s.cfg.LeadUntil == nil {
		return fromFile, toFile, nil
	}
	put := func(ctx context.Context, b []byte) error {
		ctx, cancel := context.WithTimeout(ctx, osdCallTimeout)
		defer cancel()
		sealed := s.fkeys.sealRing(b)
		return s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Put(keyCapRing, sealed) })
	}
	// Rotation is the leader's (with several active processes, the
	// others adopt what it stores: multi.go's adoptShared).
	toEngine := func(b []byte) error { return put(kv.AsLeader(context.Background()), b) }
	var sealed []byte
	if err := s.kv.View(ctx, func(r kv.Reader) error {
		var err error
		sealed, err = r.Get(keyCapRing)
		return err
	}); err != nil {
		return nil, nil, err
	}
	if sealed == nil {
		if fromFile != nil {
			if err := put(ctx, fromFile); err != nil {
				return nil, nil, err
			}
		}
		return fromFile, toEngine, nil
	}
	b, err := s.fkeys.openRing(sealed)
	if err != nil {
		return nil, nil, fmt.Errorf("the capability key ring in the metadata store does not open with this MDS's filekeys.key: %w", err)
	}
	return b, toEngine, nil
}

// save stores the ring (kr.store). Callers hold kr.mu.
func (kr *keyRing) save() error {
	keys, cur := kr.ring.Keys()
	f := keyFile{V: 1, Current: cur}
	for id, k := range keys {
		f.Keys = append(f.Keys, keyFileKey{ID: id, Key: hex.EncodeToString(k), RetireNs: kr.retire[id]})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return kr.store(b)
}

// heard notes the key ids an OSD holds and returns the ring it is to hold.
func (kr *keyRing) heard(osd uint32, held uint64) ([]mdsproto.CapKey, uint8) {
	kr.mu.Lock()
	if _, ok := kr.held[osd]; ok || len(kr.held) < maxOSDOwnersCached {
		kr.held[osd] = held
	}
	kr.mu.Unlock()
	keys, cur := kr.ring.Keys()
	out := make([]mdsproto.CapKey, 0, len(keys))
	for id, k := range keys {
		out = append(out, mdsproto.CapKey{ID: id, Key: k})
	}
	return out, cur
}

// rotate makes a new key current once every up OSD holds it, and
// schedules the keys before it to retire after retireAfter. Rotations
// run one at a time (kr.rotating); kr.mu is held only to change the ring,
// never across the wait, and the ring is read again after it.
func (kr *keyRing) rotate(ctx context.Context, _ struct{}) (mdsproto.KeyRotateResp, error) {
	kr.rotating.Lock()
	defer kr.rotating.Unlock()
	id, err := kr.addPending()
	if err != nil {
		return mdsproto.KeyRotateResp{}, err
	}
	if err := kr.awaitRollout(ctx, id); err != nil {
		// Not in use: it leaves the ring, and its id is free again.
		kr.mu.Lock()
		keys, cur := kr.ring.Keys()
		delete(keys, id)
		kr.ring.Set(keys, cur)
		saveErr := kr.save()
		kr.mu.Unlock()
		return mdsproto.KeyRotateResp{}, errors.Join(err, saveErr)
	}
	kr.mu.Lock()
	defer kr.mu.Unlock()
	keys, prev := kr.ring.Keys()
	retireAt := kr.cfg.Now().Add(kr.retireAfter()).UnixNano()
	for old := range keys {
		if old != id && kr.retire[old] == 0 {
			kr.retire[old] = retireAt
		}
	}
	kr.ring.Set(keys, id)
	if err := kr.save(); err != nil {
		return mdsproto.KeyRotateResp{}, err
	}
	kr.cfg.Log.Info("capability key rotated", "id", id, "previous", prev, "retire_at", time.Unix(0, retireAt))
	return mdsproto.KeyRotateResp{ID: id, RetireNs: retireAt}, nil
}

// addPending adds a new key to the ring, not yet current, and saves it.
func (kr *keyRing) addPending() (uint8, error) {
	kr.mu.Lock()
	defer kr.mu.Unlock()
	keys, cur := kr.ring.Keys()
	id := cur
	for {
		id = (id + 1) % (capability.MaxKeyID + 1)
		if _, used := keys[id]; !used {
			break
		}
		if id == cur {
			return 0, wire.Errorf(wire.ErrBusy, "all %d key ids are in use; retry once old keys retire", capability.MaxKeyID+1)
		}
	}
	fresh, err := capability.NewKey()
	if err != nil {
		return 0, err
	}
	keys[id] = fresh
	kr.ring.Set(keys, cur)
	return id, kr.save()
}

// retireAfter is how long a replaced key stays: past the longest
// capability the MDS issues with it (recover-metadata's scans, an hour).
func (kr *keyRing) retireAfter() time.Duration {
	if kr.cfg.KeyRetireAfter > 0 {
		return kr.cfg.KeyRetireAfter
	}
	return max(kr.cfg.CapTTL, repairLease, scanCapLifetime) + time.Minute
}

// awaitRollout waits until every up OSD holds key id.
func (kr *keyRing) awaitRollout(ctx context.Context, id uint8) error {
	deadline := time.Now().Add(rolloutWait)
	for {
		var missing []uint32
		kr.mu.Lock()
		for _, o := range kr.cluster.status(kr.cfg.Now()) {
			if o.State == mdsproto.StateUp && kr.held[o.ID]&(1<<id) == 0 {
				missing = append(missing, o.ID)
			}
		}
		kr.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return wire.Errorf(wire.ErrBusy, "OSDs %v have not taken the new key in %v; it is not in use: rotate again once they heartbeat", missing, rolloutWait)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// retireKeys drops keys whose time has come.
func (kr *keyRing) retireKeys() error {
	kr.mu.Lock()
	defer kr.mu.Unlock()
	keys, cur := kr.ring.Keys()
	now := kr.cfg.Now().UnixNano()
	changed := false
	for id, at := range kr.retire {
		if id != cur && kr.sights.deadline(sightKey, []byte{id}, at, kr.retireAfter()) <= now {
			delete(keys, id)
			delete(kr.retire, id)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	kr.ring.Set(keys, cur)
	kr.cfg.Log.Info("capability keys retired", "left", len(keys))
	return kr.save()
}
