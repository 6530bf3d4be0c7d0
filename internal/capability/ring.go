package capability

import (
	"crypto/hmac"
	"maps"
	"sync"
	"time"
)

// Key ids. A capability names the key that signed it in the six high
// bits of its rights byte, which the MAC covers, so keys can rotate with
// no change to the encoding: a capability from before key ids names key
// 0, the cluster key file's. Ids are reused modulo 64; a cluster holds a
// few keys at once (the current one, one being rolled out, ones retiring
// until the capabilities they signed expire).
const (
	MaxKeyID   = 63
	rightsMask = Rights(0b11)
)

// KeyID is the id of the key that signed c.
func (c Cap) KeyID() uint8 { return uint8(c.Rights >> 2) }

// Ring is a set of keys by id, one of them current: it signs with the
// current key and checks with whichever key a capability names. Safe for
// concurrent use.
type Ring struct {
	mu      sync.RWMutex
	keys    map[uint8]Key
	current uint8
}

// NewRing is a ring holding k as key 0, current.
func NewRing(k Key) *Ring { return &Ring{keys: map[uint8]Key{0: k}} }

// Issue signs a capability with the current key.
func (r *Ring) Issue(ino uint64, rights Rights, version uint64, expiry time.Time) Cap {
	r.mu.RLock()
	id, k := r.current, r.keys[r.current]
	r.mu.RUnlock()
	c := Cap{Ino: ino, Rights: rights&rightsMask | Rights(id)<<2, Version: version, Expiry: expiry.UnixNano()}
	c.MAC = k.mac(&c)
	return c
}

// Check verifies c with the key it names (ErrForged if the ring has none
// by that id) and as Key.Check does.
func (r *Ring) Check(c Cap, ino uint64, need Rights, now time.Time) error {
	r.mu.RLock()
	k, ok := r.keys[c.KeyID()]
	r.mu.RUnlock()
	if !ok {
		return ErrForged
	}
	return k.Check(c, ino, need, now)
}

// Sign signs a node-to-node message with the current key.
func (r *Ring) Sign(label string, msg []byte) []byte {
	r.mu.RLock()
	k := r.keys[r.current]
	r.mu.RUnlock()
	return k.Sign(label, msg)
}

// VerifySignature accepts a signature by any key of the ring.
func (r *Ring) VerifySignature(label string, msg, sig []byte) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ok := false
	for _, k := range r.keys {
		ok = hmac.Equal(k.Sign(label, msg), sig) || ok
	}
	return ok
}

// Keys is a copy of the ring's keys and its current id.
func (r *Ring) Keys() (map[uint8]Key, uint8) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.keys), r.current
}

// Set replaces the ring's keys; current must be among them.
func (r *Ring) Set(keys map[uint8]Key, current uint8) bool {
	if _, ok := keys[current]; !ok {
		return false
	}
	for id, k := range keys {
		if id > MaxKeyID || len(k) != keyBytes {
			return false
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys, r.current = maps.Clone(keys), current
	return true
}
