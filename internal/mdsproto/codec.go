package mdsproto

import (
	"bytes"
	"fmt"

	"github.com/fxamacker/cbor/v2"

	"github.com/braidfs/braid/internal/wire"
)

// The body codec. Format 2 bodies are CBOR (RFC 8949) maps keyed by each
// field's json name, with every Go string (names, symlink targets, paths)
// encoded as a CBOR byte string: a name is the bytes POSIX gave it, never
// text, so two names a text encoding would merge (bytes that are not
// UTF-8 become U+FFFD in JSON) stay two names. Format 1 was JSON.
//
// Decoding is strict where a hostile body could cost memory or mean two
// things (duplicate keys, indefinite lengths, tags, deep nesting are
// refused) and lenient where versions differ: fields it does not know
// are skipped, fields missing are zero. Bounds on lengths come from the
// frame (wire.MaxMetaBytes) and the limits below.
//
// What the MDS stored itself (records) decodes with the same strictness
// but no count limits: whatever it once wrote, an older release's inode
// with many attributes included, must read back.

// Limits on a decoded body from the network, below the library's defaults.
const (
	maxBodyNesting     = 16
	maxBodyArrayLength = 1 << 17 // entries in one list (a page of names)
	maxBodyMapPairs    = 1 << 12 // fields of one message, or entries of one map
	maxStoredCount     = 1<<31 - 1
)

// codec holds the encoding and decoding modes. They are immutable once
// built and safe for concurrent use.
type codec struct {
	enc    cbor.UserBufferEncMode
	dec    cbor.DecMode // bodies from the network
	stored cbor.DecMode // what the MDS wrote itself
}

var bodyCodec = mustCodec()

func mustCodec() codec {
	enc, err := cbor.EncOptions{String: cbor.StringToByteString}.UserBufferEncMode()
	if err != nil {
		panic(err) // the options are constants: a failure is a programming error
	}
	opts := cbor.DecOptions{
		DupMapKey:          cbor.DupMapKeyEnforcedAPF,
		IndefLength:        cbor.IndefLengthForbidden,
		TagsMd:             cbor.TagsForbidden,
		MaxNestedLevels:    maxBodyNesting,
		MaxArrayElements:   maxBodyArrayLength,
		MaxMapPairs:        maxBodyMapPairs,
		ByteStringToString: cbor.ByteStringToStringAllowed,
	}
	dec, err := opts.DecMode()
	if err != nil {
		panic(err)
	}
	opts.MaxArrayElements, opts.MaxMapPairs = maxStoredCount, maxStoredCount
	stored, err := opts.DecMode()
	if err != nil {
		panic(err)
	}
	return codec{enc: enc, dec: dec, stored: stored}
}

// Marshal encodes a request or response body.
func Marshal(v any) ([]byte, error) {
	b, err := bodyCodec.enc.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %v", wire.ErrInternal, v, err)
	}
	return b, nil
}

// AppendMarshal appends v's encoding to dst: one encode, no copy of its
// own (records put their header first; listings gather entries).
func AppendMarshal(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	if err := bodyCodec.enc.MarshalToBuffer(v, buf); err != nil {
		return dst, fmt.Errorf("%w: encode %T: %v", wire.ErrInternal, v, err)
	}
	return buf.Bytes(), nil
}

// Raw is an encoded body or part of one, sent as it is.
type Raw = cbor.RawMessage

// UnmarshalStored decodes what the MDS stored itself: as strict as
// Unmarshal, but with no limit on counts.
func UnmarshalStored(b []byte, v any) error {
	if err := bodyCodec.stored.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
	}
	return nil
}

// Unmarshal decodes a body strictly, as a bad-request error.
func Unmarshal(b []byte, v any) error {
	if len(b) > 0 && b[0] == '{' { // a CBOR message starts with a map header, never '{'
		return fmt.Errorf("%w: a format 1 (JSON) body; braid's MDS and clients speak format 2 (CBOR) since 2026-11: upgrade the older side", wire.ErrBadRequest)
	}
	if err := bodyCodec.dec.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
	}
	return nil
}

// AppendField adds key: v to a body encoded as a CBOR map of fewer than
// 255 pairs (every body this package defines), without decoding it: a
// field carried beside every request (its caller) or answer (a cache
// note). A body it cannot extend comes back unchanged.
func AppendField(meta []byte, key string, v any) []byte {
	val, err := Marshal(v)
	if err != nil || len(key) >= 24 || len(meta) == 0 {
		return meta
	}
	// The key as a text string (field names are), the value as Marshal
	// makes it.
	field := append([]byte{0xa1, 0x60 + byte(len(key))}, key...)
	field = append(field, val...)
	var n int
	var body []byte
	switch h := meta[0]; {
	case h >= 0xa0 && h <= 0xb7:
		n, body = int(h-0xa0), meta[1:]
	case h == 0xb8 && len(meta) >= 2:
		n, body = int(meta[1]), meta[2:]
	default:
		return meta
	}
	out := make([]byte, 0, len(meta)+len(field)+1)
	switch n++; {
	case n < 24:
		out = append(out, 0xa0+byte(n))
	case n < 256:
		out = append(out, 0xb8, byte(n))
	default:
		return meta
	}
	out = append(out, body...)
	return append(out, field[1:]...)
}
