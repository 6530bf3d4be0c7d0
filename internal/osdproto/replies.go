package osdproto

import "github.com/braidfs/braid/internal/wire"

// Decoders and checks of OSD replies that every reader of objects
// shares: the client's file I/O, the repair worker and the checker.

// ReadReply decodes the meta of an OSD's read reply: one that does not
// say how long the object is cannot be vouched for.
func ReadReply(meta []byte) (ObjectInfo, error) {
	info, err := DecodeObjectInfo(meta)
	if err != nil {
		return info, wire.Errorf(wire.ErrLost, "read reply without the object's length: %v", err)
	}
	return info, nil
}

// Vouch checks an OSD's reply to a read of object bytes [off, off+n) of
// a component whose group's objects hold written data up to extent. An
// OSD reads a missing object, and bytes past an object's end, as zeros
// (so holes read like data); whether zeros are a hole or lost data is
// decided by the MDS's record of the extent, never guessed: an object
// shorter than the extent where the read reaches has lost data.
func Vouch(info ObjectInfo, off, n, extent int64) error {
	need := min(extent, off+n)
	switch {
	case need <= off || info.Len >= need:
		return nil
	case info.Version == 0 && info.Len == 0:
		return wire.Errorf(wire.ErrLost, "missing on its OSD, %d bytes were written", extent)
	default:
		return wire.Errorf(wire.ErrLost, "object ends at byte %d, %d bytes were written", info.Len, extent)
	}
}

// BootOf is the boot a Sync reply names, or the call's error.
func BootOf(meta []byte, err error) (uint64, error) {
	if err != nil {
		return 0, err
	}
	return DecodeBoot(meta)
}

// WriteReplyOf is a Write reply, or the call's error.
func WriteReplyOf(meta []byte, err error) (WriteReply, error) {
	if err != nil {
		return WriteReply{}, err
	}
	return DecodeWriteReply(meta)
}

// StripeHole reports whether a stripe of w units holds no data, unit(u)
// saying whether unit u's map is known and, if so, whether it shows
// data: at least k known holes and no known data.
func StripeHole(w, k int, unit func(u int) (known, data bool)) bool {
	holes := 0
	for u := range w {
		known, data := unit(u)
		if known && data {
			return false
		}
		if known {
			holes++
		}
	}
	return holes >= k
}

// BitSet reports whether bit i of a data map is set.
func BitSet(b []byte, i int64) bool { return b[i/8]&(1<<(i%8)) != 0 }
