package mds

import (
	"context"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// S3 users: access keys for the S3 gateway, stored in the metadata engine
// so that every gateway of the cluster accepts the same keys.
//
//	S3u/<name>    user record (s3UserRec, with the secret sealed: s3secrets.go)
//	S3k/<access>  access key → name
//	S3n           the next uid of the S3 users' range (8 bytes, big endian)
//	S3i/<uid>/<name>  the users acting as uid (uid: 8 bytes, big endian)
//
// A user acts as its uid, gid and groups (the gateway checks its objects'
// modes with them). Records an MDS made before users had identities have
// none: they act as nobody, so an upgrade opens nothing.
const (
	maxS3Users       = 10_000
	s3AccessKeyBytes = 12 // "BR" + 18 of its base32 characters (90 random bits): 20, as AWS access key ids
	s3SecretBytes    = 30 // 40 base64 characters, as AWS secrets
)

// s3Users is the MDS's keeper of S3 users: their records in the store
// and the key their secrets are sealed with.
type s3Users struct {
	kv   kv.Engine
	seal cipher.AEAD // seals S3 users' secrets (s3secrets.go)
	now  func() time.Time
}

var s3UserName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+=,-]{0,63}$`)

type s3UserRec struct {
	Format int `json:"v"`
	mdsproto.S3User
	Sealed []byte `json:"sealed,omitempty"` // the secret, sealed (SecretKey is then empty)
	HasIDs bool   `json:"ids,omitempty"`    // Uid, Gid and Groups were given (unset: nobody)
}

// user is the record's user with the identity it acts as.
func (rec *s3UserRec) user() mdsproto.S3User {
	u := rec.S3User
	if !rec.HasIDs {
		u.Uid, u.Gid, u.Groups, u.Admin = nobody, nobody, nil, false
	}
	return u
}

func s3UidPrefix(uid uint32) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), s3UidPrefixBase...), uint64(uid))
}

func s3UidKey(uid uint32, name string) []byte {
	return append(append(s3UidPrefix(uid), '/'), name...)
}

// uidTaken reports whether an S3 user acts as uid.
func uidTaken(tx kv.Txn, uid uint32) (bool, error) {
	p := append(s3UidPrefix(uid), '/')
	taken := false
	err := tx.Scan(p, kv.PrefixEnd(p), func(_, _ []byte) bool { taken = true; return false })
	return taken, err
}

// assignIDs gives u the identity req asks for, or the next uid of the S3
// users' range that no user acts as. Users given the same uid are one
// owner to the gateway (two keys of one person); root is an admin's only.
func assignIDs(tx kv.Txn, req mdsproto.S3UserReq, u *mdsproto.S3User) error {
	if len(req.Groups) > mdsproto.MaxS3UserGroups {
		return wire.Errorf(wire.ErrInvalid, "%d groups: at most %d", len(req.Groups), mdsproto.MaxS3UserGroups)
	}
	u.Groups, u.Admin = slices.Clone(req.Groups), req.Admin
	if req.Uid != nil {
		u.Uid = *req.Uid
		if u.Uid == 0 && !u.Admin {
			return wire.Errorf(wire.ErrInvalid, "uid 0 is root's: an S3 user acting as root must be an admin (--admin)")
		}
	} else if err := nextS3Uid(tx, u); err != nil {
		return err
	}
	u.Gid = u.Uid
	if req.Gid != nil {
		u.Gid = *req.Gid
	}
	return tx.Put(s3UidKey(u.Uid, u.Name), nil)
}

// nextS3Uid gives u the next free uid of the S3 users' range (at most
// maxS3Users are taken, so as many tries find one).
func nextS3Uid(tx kv.Txn, u *mdsproto.S3User) error {
	next := uint64(mdsproto.FirstS3Uid)
	v, err := tx.Get(s3NextUidKey)
	if err != nil {
		return err
	}
	if len(v) == 8 {
		next = binary.BigEndian.Uint64(v)
	}
	for try := 0; ; try++ {
		if next >= math.MaxUint32 || try > maxS3Users { // (uint32)-1 is no uid
			return wire.Errorf(wire.ErrNoSpace, "the S3 users' uid range is used up: give --uid")
		}
		taken, err := uidTaken(tx, uint32(next))
		if err != nil {
			return err
		}
		if !taken {
			break
		}
		next++
	}
	u.Uid = uint32(next)
	return tx.Put(s3NextUidKey, binary.BigEndian.AppendUint64(nil, next+1))
}

func (u3 *s3Users) add(ctx context.Context, req mdsproto.S3UserReq) (mdsproto.S3User, error) {
	if !s3UserName.MatchString(req.Name) {
		return mdsproto.S3User{}, wire.Errorf(wire.ErrInvalid, "user name %q: 1-64 letters, digits and ._@+=,-", req.Name)
	}
	access, secret := make([]byte, s3AccessKeyBytes), make([]byte, s3SecretBytes)
	_, _ = rand.Read(access) // crypto/rand never fails on Linux
	_, _ = rand.Read(secret)
	u := mdsproto.S3User{Name: req.Name, AccessKey: "BR" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(access)[:18],
		SecretKey: base64.RawStdEncoding.EncodeToString(secret), CreatedNs: u3.now().UnixNano()}
	err := u3.kv.Update(ctx, func(tx kv.Txn) error {
		if ok, err := getRecord(tx, s3UserKey(req.Name), &s3UserRec{}); err != nil {
			return err
		} else if ok {
			return wire.Errorf(wire.ErrExists, "S3 user %s", req.Name)
		}
		n := 0
		if err := tx.Scan(s3UserPrefix, pastPrefix(s3UserPrefix), func(_, _ []byte) bool { n++; return n < maxS3Users }); err != nil {
			return err
		}
		if n >= maxS3Users {
			return wire.Errorf(wire.ErrNoSpace, "%d S3 users already", n)
		}
		if err := assignIDs(tx, req, &u); err != nil {
			return err
		}
		if err := tx.Put(s3AccessKey(u.AccessKey), []byte(u.Name)); err != nil {
			return err
		}
		rec := s3UserRec{Format: recFormat, S3User: u, HasIDs: true}
		u3.sealSecret(&rec)
		return putRecord(tx, s3UserKey(u.Name), rec)
	})
	return u, err
}

func (u3 *s3Users) list(ctx context.Context, _ struct{}) (mdsproto.S3UserListResp, error) {
	var out mdsproto.S3UserListResp
	err := u3.kv.View(ctx, func(r kv.Reader) error {
		out.Users = nil
		return r.Scan(s3UserPrefix, pastPrefix(s3UserPrefix), func(_, v []byte) bool {
			var rec s3UserRec
			if decodeRecord(v, &rec) == nil {
				u := rec.user()
				u.SecretKey = ""
				out.Users = append(out.Users, u)
			}
			return true
		})
	})
	return out, err
}

func (u3 *s3Users) remove(ctx context.Context, req mdsproto.S3UserReq) (struct{}, error) {
	err := u3.kv.Update(ctx, func(tx kv.Txn) error {
		var rec s3UserRec
		if ok, err := getRecord(tx, s3UserKey(req.Name), &rec); err != nil {
			return err
		} else if !ok {
			return wire.Errorf(wire.ErrNotFound, "S3 user %s", req.Name)
		}
		if err := tx.Delete(s3AccessKey(rec.AccessKey)); err != nil {
			return err
		}
		if rec.HasIDs {
			if err := tx.Delete(s3UidKey(rec.Uid, rec.Name)); err != nil {
				return err
			}
		}
		return tx.Delete(s3UserKey(req.Name))
	})
	return struct{}{}, err
}

// s3SigningKey derives the SigV4 signing key of an access key for one
// day, region and service (AWS: kSigning = HMAC chain over "AWS4"+secret).
func (u3 *s3Users) signingKey(ctx context.Context, req mdsproto.S3SigningKeyReq) (mdsproto.S3SigningKeyResp, error) {
	if len(req.AccessKey) > 128 || len(req.Date) != 8 || len(req.Region) > 64 || len(req.Service) > 64 {
		return mdsproto.S3SigningKeyResp{}, wire.Errorf(wire.ErrInvalid, "signing key request out of bounds")
	}
	var rec s3UserRec
	err := u3.kv.View(ctx, func(r kv.Reader) error {
		name, err := r.Get(s3AccessKey(req.AccessKey))
		if err != nil {
			return err
		}
		if name == nil {
			return wire.Errorf(wire.ErrNotFound, "access key %s", req.AccessKey)
		}
		if ok, err := getRecord(r, s3UserKey(string(name)), &rec); err != nil {
			return err
		} else if !ok {
			return wire.Errorf(wire.ErrNotFound, "access key %s", req.AccessKey)
		}
		return nil
	})
	if err != nil {
		return mdsproto.S3SigningKeyResp{}, err
	}
	secret, err := u3.secretOf(&rec)
	if err != nil {
		return mdsproto.S3SigningKeyResp{}, err
	}
	k := hmacSHA256([]byte("AWS4"+secret), req.Date)
	k = hmacSHA256(k, req.Region)
	k = hmacSHA256(k, req.Service)
	u := rec.user()
	return mdsproto.S3SigningKeyResp{Name: rec.Name, Key: hmacSHA256(k, "aws4_request"),
		Uid: u.Uid, Gid: u.Gid, Groups: u.Groups, Admin: u.Admin}, nil
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}
