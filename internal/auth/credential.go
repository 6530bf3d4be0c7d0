package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/braidfs/braid/internal/durable"
	"github.com/braidfs/braid/internal/wire"
)

// Credential is a principal's certificate and key, and the CA that
// vouches for it and for its peers.
type Credential struct {
	Principal Principal
	cert      tls.Certificate
	roots     *x509.CertPool
	caRaw     []byte // the CA's certificate (DER)
	pem       []byte
}

// CAFingerprint is the SHA-256 of the certificate of the CA that issued
// the credential.
func (c *Credential) CAFingerprint() [32]byte { return sha256.Sum256(c.caRaw) }

// maxCredentialBytes bounds a credential file.
const maxCredentialBytes = 64 << 10

// ParseCredential reads a credential file's content (doc.go).
func ParseCredential(b []byte) (*Credential, error) {
	if len(b) > maxCredentialBytes {
		return nil, fmt.Errorf("auth: credential of %d bytes", len(b))
	}
	var blocks []*pem.Block
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		blocks = append(blocks, blk)
	}
	if len(blocks) != 3 || blocks[0].Type != "CERTIFICATE" || blocks[1].Type != "PRIVATE KEY" || blocks[2].Type != "CERTIFICATE" {
		return nil, fmt.Errorf("auth: a credential is PEM: certificate, private key, CA certificate")
	}
	leaf, err := x509.ParseCertificate(blocks[0].Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: credential certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(blocks[2].Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: credential CA: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(blocks[1].Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: credential key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, fmt.Errorf("auth: the credential's key is not its certificate's")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("auth: the credential's CA did not sign it: %w", err)
	}
	p, err := principalOf(leaf)
	if err != nil {
		return nil, err
	}
	return &Credential{
		Principal: p,
		cert:      tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf},
		roots:     roots,
		caRaw:     ca.Raw,
		pem:       slices.Clone(b),
	}, nil
}

// LoadCredential reads a credential file. It refuses one that others
// may read: it holds a private key.
func LoadCredential(path string) (*Credential, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("auth: %s is readable by others (mode %v); chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseCredential(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Save writes the credential to path (0600), replacing what is there.
func (c *Credential) Save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return durable.WriteFile(path, c.pem, 0o600)
}

// ServerTLS is the TLS configuration of a server that admits only
// principals of c's CA.
func (c *Credential) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifiedPrincipal(&cs)
			return err
		},
	}
}

// ClientTLS is the TLS configuration of a client of a server whose role
// is serverRole, under c's CA. Servers are checked by CA and role, not
// by host name: a cluster's addresses change, its CA does not.
func (c *Credential) ClientTLS(serverRole string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{c.cert},
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: the server showed no certificate", ErrDenied)
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("%w: the server is not of this cluster: %v", ErrDenied, err)
			}
			p, err := principalOf(leaf)
			if err != nil {
				return err
			}
			if p.Role != serverRole {
				return fmt.Errorf("%w: the server is %s, not a %s", ErrDenied, p, serverRole)
			}
			return nil
		},
	}
}

// handshakeTimeout bounds a TLS handshake, so a peer that connects and
// says nothing holds no server goroutine long.
const handshakeTimeout = 10 * time.Second

// Network is nw with TLS on every connection: servers it listens for
// admit only principals of c's CA, and clients it dials accept only a
// server of serverRole under it.
func Network(nw wire.Network, c *Credential, serverRole string) wire.Network {
	return tlsNetwork{inner: wire.OrTCP(nw), server: c.ServerTLS(), client: c.ClientTLS(serverRole)}
}

type tlsNetwork struct {
	inner          wire.Network
	server, client *tls.Config
}

// Listen returns a listener whose connections are TLS. Their handshake
// runs when the server first reads (wire.Server bounds it), not in
// Accept, so a slow peer never stalls accepting others.
func (n tlsNetwork) Listen(addr string) (net.Listener, error) {
	ln, err := n.inner.Listen(addr)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, n.server), nil
}

func (n tlsNetwork) Dial(ctx context.Context, addr string) (net.Conn, error) {
	raw, err := n.inner.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, n.client)
	hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	if err := conn.HandshakeContext(hctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", addr, err)
	}
	return conn, nil
}

// TLSScheme prefixes the address of an OSD that serves TLS, as it
// announces itself in heartbeats and the MDS hands it to clients.
const TLSScheme = "tls://"

// DataNetwork is nw for the data path: an address with TLSScheme is
// dialled over TLS as c's principal, to a server c's CA vouches for as an
// OSD; any other plainly. Without a credential a TLS address is refused.
func DataNetwork(nw wire.Network, c *Credential) wire.Network {
	d := dataNetwork{inner: wire.OrTCP(nw)}
	if c != nil {
		d.tls = Network(nw, c, RoleOSD)
	}
	return d
}

type dataNetwork struct {
	inner wire.Network
	tls   wire.Network // nil: no credential
}

func (n dataNetwork) Listen(addr string) (net.Listener, error) { return n.inner.Listen(addr) }

func (n dataNetwork) Dial(ctx context.Context, addr string) (net.Conn, error) {
	host, ok := strings.CutPrefix(addr, TLSScheme)
	if !ok {
		return n.inner.Dial(ctx, addr)
	}
	if n.tls == nil {
		return nil, fmt.Errorf("%w: the OSD at %s speaks TLS; this client has no credential", ErrDenied, host)
	}
	return n.tls.Dial(ctx, host)
}
