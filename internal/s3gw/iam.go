package s3gw

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3err"

	"github.com/braidfs/braid"
)

// IAM answers versitygw's account questions from the MDS. Signing keys
// are cached for signingKeyTTL (a removed user's key works at most that
// much longer on a gateway that used it), at most maxCachedKeys of them.
type iam struct {
	cl *braid.Client

	mu   sync.Mutex
	keys map[signingKeyID]cachedKey
	now  func() time.Time
}

const (
	signingKeyTTL = 30 * time.Second
	maxCachedKeys = 4096
)

type signingKeyID struct{ access, date, region, service string }

type cachedKey struct {
	key     []byte
	fetched time.Time
}

var (
	_ auth.IAMService         = (*iam)(nil)
	_ auth.SigningKeyProvider = (*iam)(nil)
)

func newIAM(cl *braid.Client) *iam {
	return &iam{cl: cl, keys: map[signingKeyID]cachedKey{}, now: time.Now}
}

// DeriveSigningKey gives versitygw the SigV4 signing key without the
// secret: the MDS derives it.
func (m *iam) DeriveSigningKey(access, sessionToken, date, region, service string) ([]byte, auth.Account, error) {
	if sessionToken != "" {
		return nil, auth.Account{}, s3err.GetAPIError(s3err.ErrInvalidAccessKeyID)
	}
	id := signingKeyID{access, date, region, service}
	now := m.now()
	m.mu.Lock()
	c, ok := m.keys[id]
	m.mu.Unlock()
	if !ok || now.Sub(c.fetched) > signingKeyTTL {
		_, key, err := m.cl.S3SigningKey(opCtx(), access, date, region, service)
		if errors.Is(err, braid.ErrNotFound) || errors.Is(err, braid.ErrInvalid) {
			return nil, auth.Account{}, auth.ErrNoSuchUser
		}
		if err != nil {
			return nil, auth.Account{}, s3Error(err, s3err.ErrInternalError)
		}
		c = cachedKey{key: key, fetched: now}
		m.mu.Lock()
		if len(m.keys) >= maxCachedKeys {
			clear(m.keys)
		}
		// The strings may share memory with a request buffer the HTTP
		// server reuses: the key must be a copy.
		m.keys[signingKeyID{strings.Clone(access), strings.Clone(date), strings.Clone(region), strings.Clone(service)}] = c
		m.mu.Unlock()
	}
	return c.key, account(access), nil
}

// account is what versitygw knows of a user: every braid S3 user may use
// every bucket (the namespace is one file system; per-user permissions
// are the security issue's), which versitygw calls the admin role.
func account(access string) auth.Account {
	return auth.Account{Access: access, Role: auth.RoleAdmin}
}

// accessKeys is the set of access keys the MDS knows.
func (m *iam) accessKeys() (map[string]bool, error) {
	users, err := m.cl.S3Users(opCtx())
	if err != nil {
		return nil, s3Error(err, s3err.ErrInternalError)
	}
	keys := make(map[string]bool, len(users))
	for _, u := range users {
		keys[u.AccessKey] = true
	}
	return keys, nil
}

// GetUserAccount is asked for accounts named in ACLs; secrets stay in the
// MDS, so it answers with the account alone.
func (m *iam) GetUserAccount(access string) (auth.Account, error) {
	keys, err := m.accessKeys()
	if err != nil {
		return auth.Account{}, err
	}
	if !keys[access] {
		return auth.Account{}, auth.ErrNoSuchUser
	}
	return account(access), nil
}

func (m *iam) ResolveAccounts(access []string) ([]string, error) {
	keys, err := m.accessKeys()
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, a := range access {
		if !keys[a] {
			missing = append(missing, a)
		}
	}
	return missing, nil
}

func (m *iam) ListUserAccounts() ([]auth.Account, error) {
	keys, err := m.accessKeys()
	if err != nil {
		return nil, err
	}
	out := make([]auth.Account, 0, len(keys))
	for a := range keys {
		out = append(out, account(a))
	}
	return out, nil
}

// Users are managed with `braid s3 user`, not through the S3 admin API.
func (m *iam) CreateAccount(auth.Account) error { return adminUnsupported() }
func (m *iam) UpdateUserAccount(string, auth.MutableProps) error {
	return adminUnsupported()
}
func (m *iam) DeleteUserAccount(string) error { return adminUnsupported() }
func (m *iam) Shutdown() error                { return nil }

func adminUnsupported() error { return s3err.GetAPIError(s3err.ErrAdminMethodNotSupported) }
