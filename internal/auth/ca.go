package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/braidfs/braid/internal/durable"
)

// Lifetimes. Certificates are long-lived: credentials are revoked by
// issuing a new CA (braid's clusters are small and their principals few);
// the capability and heartbeat keys are what rotates often.
const (
	caLifetime   = 20 * 365 * 24 * time.Hour
	certLifetime = 10 * 365 * 24 * time.Hour
	clockSkew    = time.Hour // certificates are valid from this long before issue
)

// Files in a CA directory.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca.key"
)

// CA is a cluster's certificate authority.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte // Cert as PEM
}

// NewCA makes a CA for the cluster called name.
func NewCA(name string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "braid CA " + name, Organization: []string{"braid"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Issue makes a credential for p.
func (ca *CA) Issue(p Principal, now time.Time) (*Credential, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if len(p.UIDs) > maxIdentities || len(p.GIDs) > maxIdentities {
		return nil, fmt.Errorf("auth: at most %d uids and %d gids", maxIdentities, maxIdentities)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: p.Name, OrganizationalUnit: []string{p.Role}, Organization: []string{"braid"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:         p.uris(),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	b = append(b, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	b = append(b, ca.pem...)
	return ParseCredential(b)
}

// Save writes the CA into dir: its certificate, and its key (0600).
// It refuses to overwrite a CA already there.
func (ca *CA) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return err
	}
	if err := writeNew(filepath.Join(dir, caKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return err
	}
	return writeNew(filepath.Join(dir, caCertFile), ca.pem)
}

// LoadCA reads the CA saved in dir.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("auth: %s: not a CA (want %s and %s in PEM)", dir, caCertFile, caKeyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", dir, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", dir, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("auth: %s: the key is not the CA certificate's", dir)
	}
	return &CA{Cert: cert, key: key, pem: pem.EncodeToMemory(cb)}, nil
}

// HasCA reports whether dir holds a CA.
func HasCA(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, caKeyFile))
	return err == nil
}

// writeNew writes a file that must not exist yet, readable by its owner
// only, durably.
func writeNew(path string, b []byte) error { return durable.CreateFile(path, b, 0o600) }
