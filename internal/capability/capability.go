// Package capability implements the MDS-signed tokens that authorise a
// client's requests to OSDs (NASD/Panasas capabilities), and the shared
// cluster key that signs them and authenticates nodes to each other.
//
// Encoding, version 1 (57 bytes, little-endian):
//
//	0  8  ino      file the capability covers (every component object of it)
//	8  1  rights   bit 0 read, bit 1 write; bits 2-7 the signing key's id (ring.go)
//	9  8  version  layout version the client holds
//	17 8  expiry   unix nanoseconds after which the capability is refused
//	25 32 mac      HMAC-SHA256(key, "braid-cap-v1" || bytes 0..24)
package capability

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Rights a capability grants.
type Rights uint8

const (
	Read  Rights = 1 << 0
	Write Rights = 1 << 1
)

// EncodedBytes is the size of an encoded capability.
const EncodedBytes = 57

const (
	macLabel = "braid-cap-v1"
	keyBytes = 32
)

var (
	ErrForged    = errors.New("capability signature invalid")
	ErrExpired   = errors.New("capability expired")
	ErrWrongFile = errors.New("capability is for another file")
	ErrRights    = errors.New("capability lacks the rights for this operation")
	ErrEncoding  = errors.New("capability malformed")
)

// Key is the secret shared by the MDS and the OSDs.
type Key []byte

// NewKey returns a fresh random key.
func NewKey() (Key, error) {
	k := make(Key, keyBytes)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return k, nil
}

// LoadKey reads a hex-encoded key file; CreateKeyFile writes one.
func LoadKey(path string) (Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cluster key: %w", err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != keyBytes {
		return nil, fmt.Errorf("cluster key %s: want %d hex-encoded bytes", path, keyBytes)
	}
	return k, nil
}

// CreateKeyFile writes a new key to path unless a key is already there.
func CreateKeyFile(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	k, err := NewKey()
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(hex.EncodeToString(k)+"\n"), 0o600)
}

// Cap is a capability for one file's component objects.
type Cap struct {
	Ino     uint64
	Rights  Rights
	Version uint64
	Expiry  int64 // unix nanoseconds
	MAC     [32]byte
}

func (c *Cap) body() []byte {
	b := make([]byte, 0, 25)
	b = binary.LittleEndian.AppendUint64(b, c.Ino)
	b = append(b, byte(c.Rights))
	b = binary.LittleEndian.AppendUint64(b, c.Version)
	return binary.LittleEndian.AppendUint64(b, uint64(c.Expiry))
}

func (k Key) mac(c *Cap) [32]byte {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(macLabel))
	h.Write(c.body())
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// Issue signs a capability for ino valid until expiry.
func (k Key) Issue(ino uint64, r Rights, version uint64, expiry time.Time) Cap {
	c := Cap{Ino: ino, Rights: r, Version: version, Expiry: expiry.UnixNano()}
	c.MAC = k.mac(&c)
	return c
}

// Check verifies that c is genuine, unexpired, for ino, and grants need.
// The layout-version check belongs to the OSD, which knows the object's
// current version.
func (k Key) Check(c Cap, ino uint64, need Rights, now time.Time) error {
	want := k.mac(&c)
	if !hmac.Equal(want[:], c.MAC[:]) {
		return ErrForged
	}
	if now.UnixNano() > c.Expiry {
		return ErrExpired
	}
	if c.Ino != ino {
		return ErrWrongFile
	}
	if c.Rights&rightsMask&need != need {
		return ErrRights
	}
	return nil
}

// Encode returns the 57-byte wire form.
func (c Cap) Encode() []byte {
	return append(c.body(), c.MAC[:]...)
}

// Decode parses the wire form.
func Decode(b []byte) (Cap, error) {
	if len(b) != EncodedBytes {
		return Cap{}, fmt.Errorf("%w: %d bytes, want %d", ErrEncoding, len(b), EncodedBytes)
	}
	c := Cap{
		Ino:     binary.LittleEndian.Uint64(b[0:]),
		Rights:  Rights(b[8]),
		Version: binary.LittleEndian.Uint64(b[9:]),
		Expiry:  int64(binary.LittleEndian.Uint64(b[17:])),
	}
	copy(c.MAC[:], b[25:])
	return c, nil
}

// Sign authenticates a node-to-node message (heartbeats, registration):
// HMAC-SHA256 over a label and the message.
func (k Key) Sign(label string, msg []byte) []byte {
	h := hmac.New(sha256.New, k)
	h.Write([]byte(label))
	h.Write([]byte{0})
	h.Write(msg)
	return h.Sum(nil)
}

// VerifySignature checks a Sign result in constant time.
func (k Key) VerifySignature(label string, msg, sig []byte) bool {
	return hmac.Equal(k.Sign(label, msg), sig)
}
