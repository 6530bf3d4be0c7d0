package s3gw

import (
	"context"
	"errors"
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
	mdsCallBound  = 30 * time.Second // an MDS answer the gateway waits for
)

type signingKeyID struct{ access, date, region, service string }

type cachedKey struct {
	name    string
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
		ctx, cancel := context.WithTimeout(context.Background(), mdsCallBound)
		defer cancel()
		name, key, err := m.cl.S3SigningKey(ctx, access, date, region, service)
		if errors.Is(err, braid.ErrNotFound) || errors.Is(err, braid.ErrInvalid) {
			return nil, auth.Account{}, auth.ErrNoSuchUser
		}
		if err != nil {
			return nil, auth.Account{}, s3Error(err, s3err.ErrInternalError)
		}
		c = cachedKey{name: name, key: key, fetched: now}
		m.mu.Lock()
		if len(m.keys) >= maxCachedKeys {
			clear(m.keys)
		}
		m.keys[id] = c
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

// GetUserAccount is asked for accounts named in ACLs; secrets stay in the
// MDS, so it answers with the account alone.
func (m *iam) GetUserAccount(access string) (auth.Account, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mdsCallBound)
	defer cancel()
	users, err := m.cl.S3Users(ctx)
	if err != nil {
		return auth.Account{}, s3Error(err, s3err.ErrInternalError)
	}
	for _, u := range users {
		if u.AccessKey == access {
			return account(access), nil
		}
	}
	return auth.Account{}, auth.ErrNoSuchUser
}

func (m *iam) ResolveAccounts(access []string) ([]string, error) {
	var missing []string
	for _, a := range access {
		if _, err := m.GetUserAccount(a); err != nil {
			missing = append(missing, a)
		}
	}
	return missing, nil
}

func (m *iam) ListUserAccounts() ([]auth.Account, error) {
	ctx, cancel := context.WithTimeout(context.Background(), mdsCallBound)
	defer cancel()
	users, err := m.cl.S3Users(ctx)
	if err != nil {
		return nil, s3Error(err, s3err.ErrInternalError)
	}
	out := make([]auth.Account, 0, len(users))
	for _, u := range users {
		out = append(out, account(u.AccessKey))
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
