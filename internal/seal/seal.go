package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/braidfs/braid/internal/osdproto"
)

// Sizes of the format.
const (
	BlockBytes       = 4096                  // plaintext per block
	NonceBytes       = 16                    // random, per write of a block
	TagBytes         = 16                    // GCM's
	Overhead         = NonceBytes + TagBytes // stored bytes per block beyond its plaintext
	StoredBlockBytes = BlockBytes + Overhead // a full block as stored
	KeyBytes         = 32                    // AES-256
	adPrefix         = "braid-seal-v1"       // names the format in every block's additional data
	adBytes          = len(adPrefix) + 8     // the prefix and the block index
)

// ErrAuth is a stored block that does not open: changed, moved, or torn.
var ErrAuth = errors.New("encrypted block fails authentication")

// MinUnitBytes is the smallest stripe unit a sealed layout may have: a
// unit holds whole stored blocks, at least one.
const MinUnitBytes = 2 * BlockBytes

// Layout of stored blocks: a stripe unit of unit bytes holds
// BlocksPerUnit whole stored blocks from its start, and the bytes left at
// its end (unit mod StoredBlockBytes, 64 for a 1 MiB unit) stay unused.
// So no block straddles two units, let alone two stripes: rewriting a
// block is one write to one stripe, which a crash leaves old or new
// (a stripe's staged write), never torn between two.

// BlocksPerUnit is how many stored blocks a unit of unit bytes holds: at
// least one (a layout's validation refuses units below MinUnitBytes; one
// that slipped through packs blocks across units rather than dividing by
// zero).
func BlocksPerUnit(unit int64) int64 { return max(unit/StoredBlockBytes, 1) }

// GapBefore is how many unused bytes (the end of a unit) lie between
// block i-1 and block i.
func GapBefore(i, unit int64) int64 {
	if i == 0 {
		return 0
	}
	return StoredOffset(i, unit) - StoredOffset(i-1, unit) - StoredBlockBytes
}

// StoredOffset is where block i is stored.
func StoredOffset(i, unit int64) int64 {
	per := BlocksPerUnit(unit)
	return i/per*max(unit, StoredBlockBytes) + i%per*StoredBlockBytes
}

// StoredSize is how many stored bytes plaintext of size bytes takes.
func StoredSize(size, unit int64) int64 {
	if size <= 0 {
		return 0
	}
	full, rest := size/BlockBytes, size%BlockBytes
	if rest > 0 {
		return StoredOffset(full, unit) + rest + Overhead
	}
	return StoredOffset(full-1, unit) + StoredBlockBytes
}

// PlainSize is the plaintext size of stored bytes. A last stored block of
// Overhead bytes or fewer holds no plaintext; a size ending in a unit's
// unused tail counts that unit's blocks whole.
func PlainSize(stored, unit int64) int64 {
	if stored <= 0 {
		return 0
	}
	per := BlocksPerUnit(unit)
	unit = max(unit, StoredBlockBytes)
	u := (stored - 1) / unit
	within := stored - u*unit // 1..unit
	j := min((within-1)/StoredBlockBytes, per-1)
	rest := min(within-j*StoredBlockBytes, StoredBlockBytes)
	return (u*per+j)*BlockBytes + max(rest-Overhead, 0)
}

// Blocks seals and opens one file's blocks.
type Blocks struct{ aead cipher.AEAD }

// New returns the sealer of a file with data key key.
func New(key []byte) (*Blocks, error) {
	if len(key) != KeyBytes {
		return nil, fmt.Errorf("data key of %d bytes, want %d", len(key), KeyBytes)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCMWithNonceSize(b, NonceBytes)
	if err != nil {
		return nil, err
	}
	return &Blocks{aead: aead}, nil
}

// NewKey is a fresh data key.
func NewKey() []byte {
	k := make([]byte, KeyBytes)
	_, _ = rand.Read(k) // crypto/rand does not fail on Linux
	return k
}

func additional(idx int64) [adBytes]byte {
	var ad [adBytes]byte
	copy(ad[:], adPrefix)
	binary.BigEndian.PutUint64(ad[len(adPrefix):], uint64(idx))
	return ad
}

// Seal appends block idx's stored form of plain (at most BlockBytes) to
// dst.
func (s *Blocks) Seal(dst, plain []byte, idx int64) []byte {
	if len(plain) == 0 || len(plain) > BlockBytes {
		panic(fmt.Sprintf("seal: block of %d bytes", len(plain))) // callers cut blocks
	}
	start := len(dst)
	dst = append(dst, make([]byte, NonceBytes)...)
	nonce := dst[start:]
	_, _ = rand.Read(nonce)
	ad := additional(idx)
	return s.aead.Seal(dst, nonce, plain, ad[:])
}

// Open appends block idx's plaintext, from its stored form, to dst. A
// block of zeros only is a hole: its plaintext is zeros.
func (s *Blocks) Open(dst, stored []byte, idx int64) ([]byte, error) {
	if len(stored) <= Overhead || len(stored) > StoredBlockBytes {
		return dst, fmt.Errorf("%w: block %d is %d bytes", ErrAuth, idx, len(stored))
	}
	if osdproto.AllZero(stored) {
		return append(dst, make([]byte, len(stored)-Overhead)...), nil
	}
	ad := additional(idx)
	out, err := s.aead.Open(dst, stored[:NonceBytes], stored[NonceBytes:], ad[:])
	if err != nil {
		return dst, fmt.Errorf("%w: block %d", ErrAuth, idx)
	}
	return out, nil
}
