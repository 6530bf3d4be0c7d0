package mdsproto

import (
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

// Limits on a decoded body, below the library's defaults.
const (
	maxBodyNesting     = 16
	maxBodyArrayLength = 1 << 17 // entries in one list (a page of names)
	MaxBodyMapPairs    = 1 << 12 // fields of one message, or entries of one map (an inode's extended attributes stay below it)
)

// codec holds the encoding and decoding modes. They are immutable once
// built and safe for concurrent use.
type codec struct {
	enc cbor.EncMode
	dec cbor.DecMode
}

var bodyCodec = mustCodec()

func mustCodec() codec {
	enc, err := cbor.EncOptions{String: cbor.StringToByteString}.EncMode()
	if err != nil {
		panic(err) // the options are constants: a failure is a programming error
	}
	dec, err := cbor.DecOptions{
		DupMapKey:          cbor.DupMapKeyEnforcedAPF,
		IndefLength:        cbor.IndefLengthForbidden,
		TagsMd:             cbor.TagsForbidden,
		MaxNestedLevels:    maxBodyNesting,
		MaxArrayElements:   maxBodyArrayLength,
		MaxMapPairs:        MaxBodyMapPairs,
		ByteStringToString: cbor.ByteStringToStringAllowed,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return codec{enc: enc, dec: dec}
}

// Marshal encodes a request or response body.
func Marshal(v any) ([]byte, error) {
	b, err := bodyCodec.enc.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %v", wire.ErrInternal, v, err)
	}
	return b, nil
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
