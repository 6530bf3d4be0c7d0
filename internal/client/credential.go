package client

import "github.com/braidfs/braid/internal/auth"

// Credential is who a client is to the cluster's MDS: a certificate and
// key issued by the cluster's CA (`braid cred issue`), and that CA.
type Credential = auth.Credential

// LoadCredential reads a credential file (0600; PEM: certificate, key,
// CA certificate).
func LoadCredential(path string) (*Credential, error) { return auth.LoadCredential(path) }
