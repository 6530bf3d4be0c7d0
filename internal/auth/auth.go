package auth

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/braidfs/braid/internal/wire"
)

// Roles a principal may have.
const (
	RoleMDS     = "mds"     // a metadata server (and the healers it runs)
	RoleOSD     = "osd"     // an object storage daemon
	RoleHealer  = "healer"  // `braid heal` run elsewhere
	RoleGateway = "gateway" // the S3 (later NFS) gateway
	RoleAdmin   = "admin"   // whoever runs the cluster
	RoleClient  = "client"  // a mount or a program using the library
)

// Roles lists every role, for flags and tables.
var Roles = []string{RoleMDS, RoleOSD, RoleHealer, RoleGateway, RoleAdmin, RoleClient}

// ErrDenied is a credential refused: not from this cluster's CA, expired,
// or naming no principal this version understands. It is the wire's
// permission-denied code, so callers test one error either way.
var ErrDenied error = wire.ErrDenied

// encodingVersion is the certificate encoding this build writes and reads
// (doc.go).
const encodingVersion = 1

// Principal is who is on the other end of a connection.
type Principal struct {
	Name string
	Role string
	// AnyID: may act as any uid and gid (a mount serving a machine's
	// users, a gateway serving S3 users mapped to uids).
	AnyID bool
	UIDs  []uint32 // identities it may assert otherwise
	GIDs  []uint32
}

func (p Principal) String() string { return p.Role + " " + strconv.Quote(p.Name) }

// MayAct reports whether p may act as uid with primary group gid and
// supplementary groups groups.
func (p Principal) MayAct(uid, gid uint32, groups []uint32) bool {
	if p.AnyID {
		return true
	}
	if !slices.Contains(p.UIDs, uid) || !slices.Contains(p.GIDs, gid) {
		return false
	}
	for _, g := range groups {
		if !slices.Contains(p.GIDs, g) {
			return false
		}
	}
	return true
}

func validRole(r string) bool { return slices.Contains(Roles, r) }

// check says what is wrong with p as something to issue.
func (p Principal) check() error {
	switch {
	case !validRole(p.Role):
		return fmt.Errorf("auth: unknown role %q (want one of %s)", p.Role, strings.Join(Roles, ", "))
	case p.Name == "" || len(p.Name) > 128:
		return fmt.Errorf("auth: a principal needs a name of 1 to 128 bytes")
	}
	return nil
}

// uris are p's identities as URI SANs (doc.go).
func (p Principal) uris() []*url.URL {
	u := []*url.URL{{Scheme: "braid", Opaque: "v:" + strconv.Itoa(encodingVersion)}}
	if p.AnyID {
		u = append(u, &url.URL{Scheme: "braid", Opaque: "id:any"})
	}
	for _, id := range p.UIDs {
		u = append(u, &url.URL{Scheme: "braid", Opaque: "uid:" + strconv.FormatUint(uint64(id), 10)})
	}
	for _, id := range p.GIDs {
		u = append(u, &url.URL{Scheme: "braid", Opaque: "gid:" + strconv.FormatUint(uint64(id), 10)})
	}
	return u
}

// maxIdentities bounds the uids and gids one certificate may name.
const maxIdentities = 1024

// principalOf reads the principal a verified certificate names.
func principalOf(cert *x509.Certificate) (Principal, error) {
	p := Principal{Name: cert.Subject.CommonName}
	if len(cert.Subject.OrganizationalUnit) != 1 || !validRole(cert.Subject.OrganizationalUnit[0]) {
		return Principal{}, fmt.Errorf("%w: certificate %q names no braid role", ErrDenied, p.Name)
	}
	p.Role = cert.Subject.OrganizationalUnit[0]
	version := 0
	if len(cert.URIs) > 2*maxIdentities+2 {
		return Principal{}, fmt.Errorf("%w: certificate %q names too many identities", ErrDenied, p.Name)
	}
	for _, u := range cert.URIs {
		if u.Scheme != "braid" {
			continue
		}
		kind, val, _ := strings.Cut(u.Opaque, ":")
		switch kind {
		case "v":
			version, _ = strconv.Atoi(val)
		case "id":
			p.AnyID = p.AnyID || val == "any"
		case "uid", "gid":
			n, err := strconv.ParseUint(val, 10, 32)
			if err != nil {
				return Principal{}, fmt.Errorf("%w: certificate %q: bad %s %q", ErrDenied, p.Name, kind, val)
			}
			if kind == "uid" {
				p.UIDs = append(p.UIDs, uint32(n))
			} else {
				p.GIDs = append(p.GIDs, uint32(n))
			}
		}
	}
	if version != encodingVersion {
		return Principal{}, fmt.Errorf("%w: certificate %q has braid encoding %d; this build reads %d", ErrDenied, p.Name, version, encodingVersion)
	}
	if p.Name == "" {
		return Principal{}, fmt.Errorf("%w: certificate without a name", ErrDenied)
	}
	return p, nil
}

// PeerOf is the principal of a connection's verified peer.
func PeerOf(cs *tls.ConnectionState) (Principal, error) {
	if cs == nil || !cs.HandshakeComplete {
		return Principal{}, fmt.Errorf("%w: no TLS handshake", ErrDenied)
	}
	return verifiedPrincipal(cs)
}

// verifiedPrincipal is the principal of cs's verified chain (a server's
// VerifyConnection runs before the handshake completes).
func verifiedPrincipal(cs *tls.ConnectionState) (Principal, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return Principal{}, fmt.Errorf("%w: no verified certificate", ErrDenied)
	}
	return principalOf(cs.VerifiedChains[0][0])
}
