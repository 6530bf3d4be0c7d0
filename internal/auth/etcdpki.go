package auth

// The etcd members inside MDS processes (braid mds --meta-peers) talk
// mutual TLS, to each other and to their MDS, under a CA of their own:
// not the cluster's, whose credentials every client and OSD holds, since
// whoever reaches etcd reads and rewrites all metadata around the MDS's
// checks. The CA is derived from a secret every MDS of the cluster holds
// and nothing else does (filekeys.key), so the MDS processes agree on it
// with nothing more to copy: an Ed25519 key from HKDF-SHA256 of the
// secret, and a certificate made from it deterministically (Ed25519
// signatures are, and its serial and dates are fixed), the same bytes on
// every machine. Each member issues itself a certificate from it at
// start, for the hosts of its URLs; its key never leaves the process's
// directory.

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// etcdCAInfo names the derivation (a new version makes a new CA).
const etcdCAInfo = "braid etcd CA v1"

// EtcdPKI is a member's TLS material, PEM encoded.
type EtcdPKI struct {
	CA, Cert, Key []byte
}

// DeriveEtcdPKI derives the etcd CA from secret and issues member name a
// certificate for hosts (IP addresses or DNS names), valid for servers
// and clients.
func DeriveEtcdPKI(secret []byte, name string, hosts []string, now time.Time) (EtcdPKI, error) {
	if len(secret) < 16 {
		return EtcdPKI{}, errors.New("etcd CA: secret too short")
	}
	seed, err := hkdf.Key(sha256.New, secret, nil, etcdCAInfo, ed25519.SeedSize)
	if err != nil {
		return EtcdPKI{}, err
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	epoch := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "braid etcd CA", Organization: []string{"braid"}},
		NotBefore:             epoch,
		NotAfter:              epoch.AddDate(100, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return EtcdPKI{}, fmt.Errorf("etcd CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return EtcdPKI{}, err
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return EtcdPKI{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: []string{"etcd"}, Organization: []string{"braid"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, pub, caKey)
	if err != nil {
		return EtcdPKI{}, fmt.Errorf("etcd member certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return EtcdPKI{}, err
	}
	return EtcdPKI{
		CA:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
