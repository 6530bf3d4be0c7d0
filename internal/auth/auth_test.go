package auth

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/wire"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *CA, p Principal) *Credential {
	t.Helper()
	c, err := ca.Issue(p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCredentialRoundTripsItsPrincipal(t *testing.T) {
	ca := newCA(t)
	want := Principal{Name: "bob@host", Role: RoleClient, UIDs: []uint32{1000, 0}, GIDs: []uint32{100}}
	c := issue(t, ca, want)
	path := filepath.Join(t.TempDir(), "bob.cred")
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file mode %v, err %v; want 0600", fi.Mode().Perm(), err)
	}
	got, err := LoadCredential(path)
	if err != nil {
		t.Fatal(err)
	}
	p := got.Principal
	if p.Name != want.Name || p.Role != want.Role || p.AnyID || !slices.Equal(p.UIDs, want.UIDs) || !slices.Equal(p.GIDs, want.GIDs) {
		t.Fatalf("principal %+v, want %+v", p, want)
	}
	if !p.MayAct(1000, 100, []uint32{100}) || p.MayAct(1001, 100, nil) || p.MayAct(1000, 0, nil) || p.MayAct(1000, 100, []uint32{0}) {
		t.Fatal("MayAct does not follow the issued identities")
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCredential(path); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a group-readable credential loaded: %v", err)
	}
}

func TestIssueRefusesUnknownRoles(t *testing.T) {
	ca := newCA(t)
	for _, p := range []Principal{{Name: "x", Role: "root"}, {Name: "", Role: RoleClient}, {Name: strings.Repeat("n", 129), Role: RoleAdmin}} {
		if _, err := ca.Issue(p, time.Now()); err == nil {
			t.Errorf("issued %+v", p)
		}
	}
}

func TestCASaveLoadAndNoOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	ca := newCA(t)
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := newCA(t).Save(dir); err == nil {
		t.Fatal("a second CA overwrote the first")
	}
	back, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := issue(t, back, Principal{Name: "osd0", Role: RoleOSD})
	// Issued by the reloaded CA, it verifies under the original's roots.
	if _, err := ParseCredential(c.pem); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{caKeyFile, caCertFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v, err %v", f, fi.Mode().Perm(), err)
		}
	}
}

func TestParseCredentialRefusesMismatches(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	c := issue(t, ca, Principal{Name: "a", Role: RoleAdmin})
	d := issue(t, other, Principal{Name: "b", Role: RoleAdmin})
	// c's certificate and key with d's CA: the CA did not sign it.
	cut := func(b []byte, n int) string { // the first n PEM blocks
		s, i := string(b), 0
		for k := 0; k < n; k++ {
			j := strings.Index(s[i:], "-----END")
			i += j + strings.Index(s[i+j:], "\n") + 1
		}
		return s[:i]
	}
	mixed := cut(c.pem, 2) + strings.TrimPrefix(string(d.pem), cut(d.pem, 2))
	if _, err := ParseCredential([]byte(mixed)); err == nil {
		t.Fatal("a credential with another CA's certificate parsed")
	}
	if _, err := ParseCredential([]byte(cut(c.pem, 2))); err == nil {
		t.Fatal("a credential without its CA parsed")
	}
	if _, err := ParseCredential([]byte("garbage")); err == nil {
		t.Fatal("garbage parsed")
	}
}

// serve runs a TLS server on n that answers each connection with the
// principal it authenticated, then closes it.
func serve(t *testing.T, n wire.Network) string {
	t.Helper()
	ln, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn) {
				defer conn.Close()
				p, err := handshake(conn)
				if err != nil {
					return
				}
				_, _ = io.WriteString(conn, p.String()+"\n")
			}(conn)
		}
	}()
	return ln.Addr().String()
}

func handshake(conn net.Conn) (Principal, error) {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return Principal{}, errors.New("not TLS")
	}
	if err := tc.HandshakeContext(context.Background()); err != nil {
		return Principal{}, err
	}
	cs := tc.ConnectionState()
	return PeerOf(&cs)
}

func TestMutualTLSAdmitsOnlyTheCluster(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	mds := issue(t, ca, Principal{Name: "mds", Role: RoleMDS})
	addr := serve(t, Network(nil, mds, RoleMDS))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	read := func(n wire.Network) (string, error) {
		conn, err := n.Dial(ctx, addr)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(conn)
		return string(b), err
	}
	bob := issue(t, ca, Principal{Name: "bob", Role: RoleClient})
	if got, err := read(Network(nil, bob, RoleMDS)); err != nil || got != `client "bob"`+"\n" {
		t.Fatalf("the cluster's client: %q, %v", got, err)
	}
	// A client of another CA: the server refuses it (TLS 1.3 says so
	// after the client's side of the handshake, at its first read).
	if got, err := read(Network(nil, issue(t, other, Principal{Name: "eve", Role: RoleAdmin}), RoleMDS)); err == nil || got != "" {
		t.Fatalf("another cluster's admin got %q, %v", got, err)
	}
	// A client of another CA that trusts this one: refused by the server.
	stranger := issue(t, other, Principal{Name: "eve", Role: RoleAdmin})
	posing := &Credential{Principal: stranger.Principal, cert: stranger.cert, roots: bob.roots}
	if got, err := read(Network(nil, posing, RoleMDS)); err == nil || got != "" {
		t.Fatalf("another CA's certificate was admitted: %q, %v", got, err)
	}
	// A client that wants an OSD does not take the MDS for one.
	if _, err := read(Network(nil, bob, RoleOSD)); err == nil || !strings.Contains(err.Error(), "not a osd") {
		t.Fatalf("wrong server role accepted: %v", err)
	}
	// A client certificate cannot pose as the server.
	fake := serve(t, Network(nil, bob, RoleMDS))
	conn, err := Network(nil, mds, RoleMDS).Dial(ctx, fake)
	if err == nil {
		conn.Close()
		t.Fatal("a client's certificate served as the MDS")
	}
	// Plain TCP: nothing comes back.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_, _ = raw.Write(make([]byte, 64))
	_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
	if b, _ := io.ReadAll(raw); strings.Contains(string(b), "bob") || strings.Contains(string(b), "client") {
		t.Fatalf("a plain connection was answered: %q", b)
	}
}

// The etcd CA is the same wherever it is derived from the same secret,
// another from another secret, and a member's certificate verifies under
// the first only.
func TestEtcdPKIIsDerived(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	now := time.Now()
	a, err := DeriveEtcdPKI(secret, "a", []string{"127.0.0.1", "h1.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DeriveEtcdPKI(secret, "b", []string{"127.0.0.2"}, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := DeriveEtcdPKI(bytes.Repeat([]byte{8}, 32), "a", []string{"127.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.CA, b.CA) || bytes.Equal(a.CA, other.CA) {
		t.Fatal("the etcd CA is not a function of the secret")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CA)
	verify := func(certPEM []byte, host string) error {
		blk, _ := pem.Decode(certPEM)
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return err
		}
		_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	if err := verify(b.Cert, "127.0.0.2"); err != nil {
		t.Fatalf("member b under the derived CA: %v", err)
	}
	if err := verify(a.Cert, "h1.example"); err != nil {
		t.Fatalf("member a by name: %v", err)
	}
	if err := verify(other.Cert, "127.0.0.1"); err == nil {
		t.Fatal("a member of another secret verified")
	}
	if _, err := DeriveEtcdPKI([]byte("short"), "a", nil, now); err == nil {
		t.Fatal("a short secret was taken")
	}
}
