package wire

import (
	"errors"
	"fmt"
)

// Code is an error code carried in a response's status field. Each Code is
// itself an error, so a remote failure can be tested with
// errors.Is(err, wire.ErrNotFound).
type Code uint16

const (
	OK             Code = 0
	ErrInternal    Code = 1  // server-side failure not caused by the request
	ErrBadRequest  Code = 2  // malformed or invalid request
	ErrNotFound    Code = 3  // no such file, directory or object
	ErrExists      Code = 4  // name already exists
	ErrNotDir      Code = 5  // a path component is not a directory
	ErrIsDir       Code = 6  // operation needs a file, found a directory
	ErrNotEmpty    Code = 7  // directory not empty
	ErrNoSpace     Code = 8  // device full (ENOSPC)
	ErrCorrupt     Code = 9  // stored data failed its checksum
	ErrDenied      Code = 10 // capability forged, expired, wrong object or rights
	ErrStale       Code = 11 // capability's layout version is older than the object's
	ErrUnavail     Code = 12 // not enough OSDs to satisfy the request
	ErrUnknownOp   Code = 13 // op code not served here
	ErrInvalid     Code = 14 // valid request that cannot apply (EINVAL)
	ErrNameTooLong Code = 15
	ErrBusy        Code = 16 // the file is being repaired; retry shortly
	ErrNoData      Code = 17 // no such extended attribute (ENODATA)
	ErrPerm        Code = 18 // operation not permitted on this kind of inode (EPERM)
	ErrTooBig      Code = 19 // past the largest file the layout can hold (EFBIG)
	ErrLost        Code = 20 // a component object is gone, short, or unusable as a whole
	ErrOverflow    Code = 21 // the answer does not fit one frame (EOVERFLOW)
	ErrProtocol    Code = 22 // the peers share no protocol version, or the server is not what the client wanted
	ErrNotLeader   Code = 23 // this server does not serve now (an MDS that lost its lead): ask another; nothing was done
	ErrMoved       Code = 24 // this MDS does not serve that inode's slot now (the routing table changed): ask by the current table; nothing was done
	ErrRecalled    Code = 25 // the write-back claim the request names has ended: nothing was done
)

var codeNames = map[Code]string{
	ErrInternal: "internal error", ErrBadRequest: "bad request", ErrNotFound: "not found",
	ErrExists: "already exists", ErrNotDir: "not a directory", ErrIsDir: "is a directory",
	ErrNotEmpty: "directory not empty", ErrNoSpace: "no space left on device",
	ErrCorrupt: "data corrupt", ErrDenied: "permission denied", ErrStale: "stale layout version",
	ErrUnavail: "unavailable", ErrUnknownOp: "unknown operation", ErrInvalid: "invalid argument",
	ErrNameTooLong: "name too long", ErrBusy: "busy, retry later", ErrNoData: "no such attribute",
	ErrPerm: "operation not permitted", ErrTooBig: "file too large", ErrLost: "component object lost",
	ErrOverflow: "reply too large", ErrProtocol: "protocol mismatch", ErrNotLeader: "not the serving MDS",
	ErrMoved: "served by another MDS", ErrRecalled: "write-back claim ended",
}

func (c Code) Error() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("error code %d", uint16(c))
}

// RemoteError is an error reported by the peer: its code and message.
type RemoteError struct {
	Code Code
	Msg  string
}

func (e *RemoteError) Error() string { return e.Msg }
func (e *RemoteError) Unwrap() error { return e.Code }

// CodeOf maps an error to the status code sent on the wire.
func CodeOf(err error) Code {
	var c Code
	if errors.As(err, &c) {
		return c
	}
	return ErrInternal
}

// Errorf returns an error wrapping code c with a formatted message.
func Errorf(c Code, format string, args ...any) error {
	return fmt.Errorf("%w: %s", c, fmt.Sprintf(format, args...))
}
