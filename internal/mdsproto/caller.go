package mdsproto

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/braidfs/braid/internal/wire"
)

// Caller is who a request acts as: the uid, primary gid and supplementary
// groups whose permissions the MDS checks. It travels beside every
// request's own fields, as "as" (WithCaller); the MDS admits it only
// if the connection's principal may act as it (internal/auth).
type Caller struct {
	Uid    uint32   `json:"uid"`
	Gid    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// Permission bits asked of Permits.
const (
	MayExec  uint32 = 1
	MayWrite uint32 = 2
	MayRead  uint32 = 4
)

// Permits reports whether c may do want (MayRead|MayWrite|MayExec) to an
// inode of type typ with permission bits mode and owner uid:gid, by
// Linux's generic_permission: the owner's bits, else the group's
// (primary or supplementary), else the others'; root passes all but
// execute on a file that no one may execute.
func (c Caller) Permits(typ string, mode, uid, gid, want uint32) bool {
	if c.Uid == 0 {
		return want&MayExec == 0 || typ == TypeDir || mode&0o111 != 0
	}
	switch {
	case c.Uid == uid:
		mode >>= 6
	case c.Gid == gid || slices.Contains(c.Groups, gid):
		mode >>= 3
	}
	return mode&want == want
}

// MaxCallerGroups bounds a caller's supplementary groups (Linux allows
// 65536; NFS's AUTH_SYS 16).
const MaxCallerGroups = 1024

// WithCaller adds c to an encoded request.
func WithCaller(body []byte, c Caller) []byte { return AppendField(body, "as", c) }

// callerKey is the field name "as" as CBOR writes it (a text string of
// two bytes), which a body naming a caller holds.
var callerKey = []byte{0x62, 'a', 's'}

// CallerOf reads the caller a request names, if it names one. Bodies
// that cannot (most, from clients that name no one) are not decoded.
func CallerOf(body []byte) (*Caller, error) {
	if !bytes.Contains(body, callerKey) {
		return nil, nil
	}
	var v struct {
		As *Caller `json:"as"`
	}
	if err := Unmarshal(body, &v); err != nil {
		return nil, err
	}
	if v.As != nil && len(v.As.Groups) > MaxCallerGroups {
		return nil, fmt.Errorf("%w: a caller in %d groups", wire.ErrBadRequest, len(v.As.Groups))
	}
	return v.As, nil
}
