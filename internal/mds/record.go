package mds

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Records: what the MDS stores as a value (an inode, an intent, an OSD,
// a user) is a record:
//
//	offset size field
//	0      1    format  recordFormat (2)
//	1      4    crc     CRC32C (Castagnoli) of the body
//	5      ...  body    CBOR, in the protocol's codec (mdsproto.Marshal)
//
// Names inside records (an inode's entry name, a symlink's target) are
// bytes, as on the wire. Format 1 records were JSON (objects, and the
// lock incarnation a number); they are still read, and rewritten in
// format 2 on their next update. The "v" field inside a body is the
// record's own schema version, apart from the container's format byte. A record whose checksum or body does not decode is an
// error, never a zero value: a flipped bit in the store is reported, not
// taken for an empty inode. Values that are not records (directory
// entries, counters, markers) are raw bytes documented at their keys.
const (
	recordFormat    = 2
	recordHeaderLen = 5
)

// encodeRecord returns v as a record.
func encodeRecord(v any) ([]byte, error) {
	b, err := mdsproto.AppendMarshal(make([]byte, recordHeaderLen, 512), v)
	if err != nil {
		return nil, err
	}
	b[0] = recordFormat
	binary.LittleEndian.PutUint32(b[1:], wire.CRC(b[recordHeaderLen:]))
	return b, nil
}

// decodeRecord decodes record b into v.
func decodeRecord(b []byte, v any) error {
	if len(b) > 0 && b[0] != recordFormat { // JSON text never starts with byte 2
		return decodeFormat1(b, v)
	}
	if len(b) < recordHeaderLen {
		return fmt.Errorf("%w: record of %d bytes is shorter than its header", wire.ErrInternal, len(b))
	}
	body := b[recordHeaderLen:]
	if got, want := wire.CRC(body), binary.LittleEndian.Uint32(b[1:]); got != want {
		return fmt.Errorf("%w: record checksum %08x, want %08x", wire.ErrInternal, got, want)
	}
	if err := mdsproto.UnmarshalStored(body, v); err != nil {
		return fmt.Errorf("%w: record undecodable: %v", wire.ErrInternal, err)
	}
	return nil
}

// decodeFormat1 decodes what the MDS stored before format 2 (records,
// object labels): JSON.
func decodeFormat1(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %d stored bytes are neither format 2 nor format 1 (JSON): %v", wire.ErrInternal, len(b), err)
	}
	return nil
}

// getRecord reads the record at key into v; false if there is none.
func getRecord(r kv.Reader, key []byte, v any) (bool, error) {
	b, err := r.Get(key)
	if err != nil || b == nil {
		return false, err
	}
	if err := decodeRecord(b, v); err != nil {
		return false, fmt.Errorf("record %q: %w", key, err)
	}
	return true, nil
}

// putRecord stores v as the record at key.
func putRecord(tx kv.Txn, key []byte, v any) error {
	b, err := encodeRecord(v)
	if err != nil {
		return err
	}
	return tx.Put(key, b)
}
