package s3gw

import (
	"context"
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

	mu    sync.Mutex
	keys  map[signingKeyID]cachedKey
	users map[string]braid.S3User // by access key, as the last signing key named them
	now   func() time.Time
}

const (
	signingKeyTTL = 30 * time.Second
	maxCachedKeys = 4096
)

type signingKeyID struct{ access, date, region, service string }

type cachedKey struct {
	key     []byte
	user    braid.S3User // name and identity
	fetched time.Time
}

var (
	_ auth.IAMService         = (*iam)(nil)
	_ auth.SigningKeyProvider = (*iam)(nil)
)

func newIAM(cl *braid.Client) *iam {
	return &iam{cl: cl, keys: map[signingKeyID]cachedKey{}, users: map[string]braid.S3User{}, now: time.Now}
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
		user, key, err := m.cl.S3SigningKey(context.Background(), access, date, region, service)
		if errors.Is(err, braid.ErrNotFound) || errors.Is(err, braid.ErrInvalid) {
			return nil, auth.Account{}, auth.ErrNoSuchUser
		}
		if err != nil {
			return nil, auth.Account{}, s3Error(err, s3err.ErrInternalError)
		}
		user.AccessKey = strings.Clone(access)
		c = cachedKey{key: key, user: user, fetched: now}
		m.mu.Lock()
		if len(m.keys) >= maxCachedKeys {
			clear(m.keys)
		}
		// The strings may share memory with a request buffer the HTTP
		// server reuses: the key must be a copy.
		m.keys[signingKeyID{strings.Clone(access), strings.Clone(date), strings.Clone(region), strings.Clone(service)}] = c
		if len(m.users) >= maxCachedKeys {
			clear(m.users)
		}
		m.users[c.user.AccessKey] = c.user
		m.mu.Unlock()
	}
	return c.key, account(c.user), nil
}

// account is what versitygw knows of a user. A user may create buckets
// and reaches those whose ACL lets it (versitygw's "userplus"); an admin
// reaches every bucket.
func account(u braid.S3User) auth.Account {
	role := auth.RoleUserPlus
	if u.Admin {
		role = auth.RoleAdmin
	}
	return auth.Account{Access: u.AccessKey, Role: role, UserID: int(u.Uid), GroupID: int(u.Gid)}
}

// user is the S3 user of an access key whose request was just
// authenticated: the signing key's answer named it.
func (m *iam) user(access string) (braid.S3User, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.users[access]
	return u, ok
}

// accessKeys is the set of users the MDS knows, by access key.
func (m *iam) accessKeys() (map[string]braid.S3User, error) {
	users, err := m.cl.S3Users(context.Background())
	if err != nil {
		return nil, s3Error(err, s3err.ErrInternalError)
	}
	keys := make(map[string]braid.S3User, len(users))
	for _, u := range users {
		keys[u.AccessKey] = u
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
	u, ok := keys[access]
	if !ok {
		return auth.Account{}, auth.ErrNoSuchUser
	}
	return account(u), nil
}

func (m *iam) ResolveAccounts(access []string) ([]string, error) {
	keys, err := m.accessKeys()
	if err != nil {
		return nil, err
	}
	for _, a := range access {
		if _, ok := keys[a]; !ok {
			// versitygw turns a missing account of an ACL's grant into
			// a 500; S3 answers 400 InvalidArgument, and so does the
			// gateway, for a grant, a policy's principal or an owner.
			return []string{a}, s3err.InvalidArgumentError{Description: "Invalid id", ArgumentName: "CanonicalUser/ID", ArgumentValue: a}
		}
	}
	return nil, nil
}

func (m *iam) ListUserAccounts() ([]auth.Account, error) {
	keys, err := m.accessKeys()
	if err != nil {
		return nil, err
	}
	out := make([]auth.Account, 0, len(keys))
	for _, u := range keys {
		out = append(out, account(u))
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
