package wire

import (
	"encoding/binary"
	"fmt"
)

// The handshake. Every connection starts with a hello from the client (op
// OpHello, id 0, no data), which the server answers (a response with id 0)
// before it reads anything else: the protocol version both speak, the
// features both have, and the server's role. A server that cannot speak
// with the client says why in an ErrProtocol error and closes the
// connection, so a mismatch is a clear error at the first call, never a
// body misread. A request before the hello gets the same.
//
// Hello meta (little-endian):
//
//	offset size field
//	0      8    peer id     (non-zero; fence.go)
//	8      8    generation  (non-zero; fence.go)
//	16     2    min version the client accepts
//	18     2    max version the client speaks
//	20     8    features    bits the client has
//	28     2    authLen     (<= maxAuthBytes)
//	30     ...  auth        credentials; reserved: no server accepts any yet
//
// Welcome meta (the answer):
//
//	0      2    version     the one both speak: the highest in both ranges
//	2      8    features    the bits both have
//	10     1    roleLen     (<= maxRoleBytes)
//	11     ...  role        what the server is: "mds", "osd", ...
//	...    2    authLen     (<= maxAuthBytes)
//	...    ...  auth        the server's proof, for mutual authentication later
//
// The version counts the whole suite: frames, the handshake, the MDS's
// bodies (internal/mdsproto) and the OSD's messages (internal/osdproto).
// Version 1 was the 16-byte hello that got no answer; a server refuses it
// by name.
const (
	ProtocolVersion    uint16 = 2 // what this build speaks
	MinProtocolVersion uint16 = 2 // the oldest it accepts

	helloV1Bytes   = 16
	helloBaseBytes = 30
	maxAuthBytes   = 4096
	maxRoleBytes   = 32
)

// Features are optional capabilities a peer announces in the handshake;
// a connection uses those both sides have. None is defined yet: a bit is
// added with the feature that needs it, so a peer without it is told, not
// confused.
type Features uint64

// Roles servers announce.
const (
	RoleMDS = "mds"
	RoleOSD = "osd"
)

// Hello is a client's first frame.
type Hello struct {
	Peer, Gen  uint64
	MinVersion uint16
	MaxVersion uint16
	Features   Features
	Auth       []byte
}

// Welcome is a server's answer to a hello: what the connection speaks.
type Welcome struct {
	Version  uint16
	Features Features
	Role     string
	Auth     []byte
}

func (h Hello) encode() []byte {
	b := make([]byte, helloBaseBytes, helloBaseBytes+len(h.Auth))
	binary.LittleEndian.PutUint64(b, h.Peer)
	binary.LittleEndian.PutUint64(b[8:], h.Gen)
	binary.LittleEndian.PutUint16(b[16:], h.MinVersion)
	binary.LittleEndian.PutUint16(b[18:], h.MaxVersion)
	binary.LittleEndian.PutUint64(b[20:], uint64(h.Features))
	binary.LittleEndian.PutUint16(b[28:], uint16(len(h.Auth)))
	return append(b, h.Auth...)
}

func decodeHello(meta []byte) (Hello, error) {
	if len(meta) == helloV1Bytes {
		return Hello{}, Errorf(ErrProtocol, "the client speaks braid protocol 1 (a hello without a handshake); this server speaks %d to %d: upgrade the client", MinProtocolVersion, ProtocolVersion)
	}
	if len(meta) < helloBaseBytes {
		return Hello{}, Errorf(ErrProtocol, "hello of %d bytes", len(meta))
	}
	h := Hello{
		Peer:       binary.LittleEndian.Uint64(meta),
		Gen:        binary.LittleEndian.Uint64(meta[8:]),
		MinVersion: binary.LittleEndian.Uint16(meta[16:]),
		MaxVersion: binary.LittleEndian.Uint16(meta[18:]),
		Features:   Features(binary.LittleEndian.Uint64(meta[20:])),
	}
	authLen := int(binary.LittleEndian.Uint16(meta[28:]))
	switch {
	case authLen > maxAuthBytes || len(meta) != helloBaseBytes+authLen:
		return Hello{}, Errorf(ErrProtocol, "hello of %d bytes with %d of credentials", len(meta), authLen)
	case h.Peer == 0 || h.Gen == 0:
		return Hello{}, Errorf(ErrProtocol, "hello without a peer or generation")
	case h.MinVersion > h.MaxVersion:
		return Hello{}, Errorf(ErrProtocol, "hello with versions %d to %d", h.MinVersion, h.MaxVersion)
	}
	h.Auth = meta[helloBaseBytes:]
	return h, nil
}

// negotiate is the server's side: the welcome for h, or why not.
func negotiate(h Hello, role string, have Features) (Welcome, error) {
	v := min(h.MaxVersion, ProtocolVersion)
	if v < max(h.MinVersion, MinProtocolVersion) {
		return Welcome{}, Errorf(ErrProtocol, "the client speaks braid protocol %d to %d; this %s speaks %d to %d: upgrade the older one",
			h.MinVersion, h.MaxVersion, roleOr(role), MinProtocolVersion, ProtocolVersion)
	}
	if len(h.Auth) > 0 {
		return Welcome{}, Errorf(ErrProtocol, "this %s does not accept credentials", roleOr(role))
	}
	return Welcome{Version: v, Features: h.Features & have, Role: role}, nil
}

func roleOr(role string) string {
	if role == "" {
		return "server"
	}
	return role
}

func (w Welcome) encode() []byte {
	b := make([]byte, 0, 13+len(w.Role)+len(w.Auth))
	b = binary.LittleEndian.AppendUint16(b, w.Version)
	b = binary.LittleEndian.AppendUint64(b, uint64(w.Features))
	b = append(b, byte(len(w.Role)))
	b = append(b, w.Role...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(w.Auth)))
	return append(b, w.Auth...)
}

func decodeWelcome(meta []byte) (Welcome, error) {
	bad := func() (Welcome, error) {
		return Welcome{}, fmt.Errorf("%w: welcome of %d bytes", ErrFrame, len(meta))
	}
	if len(meta) < 11 {
		return bad()
	}
	w := Welcome{Version: binary.LittleEndian.Uint16(meta), Features: Features(binary.LittleEndian.Uint64(meta[2:]))}
	roleLen := int(meta[10])
	if roleLen > maxRoleBytes || len(meta) < 11+roleLen+2 {
		return bad()
	}
	w.Role = string(meta[11 : 11+roleLen])
	rest := meta[11+roleLen:]
	authLen := int(binary.LittleEndian.Uint16(rest))
	if authLen > maxAuthBytes || len(rest) != 2+authLen {
		return bad()
	}
	w.Auth = rest[2:]
	return w, nil
}
