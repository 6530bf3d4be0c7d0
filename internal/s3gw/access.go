package s3gw

// Who may do what through the gateway.
//
// Buckets: a bucket belongs to the user who created it, and its ACL
// (kept in the xattr user.s3.acl: owner, grants to named users and to
// everyone, as versitygw stores it) decides who may list it (READ), put
// and delete keys in it (WRITE), and read or change the ACL (READ_ACP,
// WRITE_ACP). versitygw checks the ACL before every request it passes on;
// a top-level directory with no ACL (made through a mount) is a bucket of
// admins only. A bucket's directory is owned by its creator's uid and gid,
// mode 0700.
//
// Objects: each is a file owned by the uid and gid of the user who wrote
// it, mode 0644. Reading it (GET, HEAD, the source of a copy) needs read
// permission, and replacing it (PUT, copy, completing an upload) write
// permission, for the user's uid, gid and groups, by the file's mode: a
// file a mount user made 0600 in a bucket stays theirs. Deleting a key is
// the bucket's WRITE, as removing a name is the directory's business in
// POSIX. An anonymous request to a public bucket acts as nobody. Admins
// (braid s3 user add --admin) act as root.
//
// The gateway checks these itself, as a mount's kernel checks POSIX
// modes for its users: at the MDS it is a server (its credential may act
// as anyone), and a bucket's grants cross directory modes that the MDS
// alone would refuse.

import (
	"context"
	"errors"
	"io/fs"
	"slices"

	"github.com/versity/versitygw/auth"
	"github.com/versity/versitygw/s3api/utils"
	"github.com/versity/versitygw/s3err"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
)

// bucketMode is the permission of a bucket's directory.
const bucketMode = 0o700

const nobodyID = 65534

// identity is who a request acts as.
type identity struct {
	braid.Caller
	access string // the access key; "" when anonymous
	admin  bool
}

// who is the identity of the request whose (versitygw) context is ctx:
// the user its signature names, or nobody.
func (b *braidBackend) who(ctx context.Context) identity {
	if id, ok := idOf(ctx); ok { // a request's operation context
		return id
	}
	acct, ok := ctx.Value(string(utils.ContextKeyAccount)).(auth.Account)
	if !ok || acct.Access == "" || acct.UserID < 0 || acct.GroupID < 0 {
		return identity{Caller: braid.Caller{Uid: nobodyID, Gid: nobodyID}}
	}
	id := identity{Caller: braid.Caller{Uid: uint32(acct.UserID), Gid: uint32(acct.GroupID)},
		access: acct.Access, admin: acct.Role == auth.RoleAdmin}
	if u, ok := b.user(acct.Access); ok && u.Uid == id.Uid {
		id.Groups = slices.Clone(u.Groups)
	}
	return id
}

// owner is what a file or directory the identity makes is owned by.
func (id identity) owner() (uid, gid uint32) { return id.Uid, id.Gid }

// permits reports whether id may do want (mdsproto.MayRead, MayWrite) to a
// file with mode and owner.
func (id identity) permits(mode fs.FileMode, uid, gid, want uint32) bool {
	if id.admin {
		return true
	}
	typ := mdsproto.TypeFile
	if mode.IsDir() {
		typ = mdsproto.TypeDir
	}
	return id.Caller.Permits(typ, uint32(mode.Perm()), uid, gid, want)
}

// need refuses with AccessDenied unless id may do want to oi.
func (id identity) need(oi objectInfo, want uint32) error {
	if id.permits(oi.mode, oi.uid, oi.gid, want) {
		return nil
	}
	return s3err.GetAPIError(s3err.ErrAccessDenied)
}

// aclOwner is the owner an ACL names ("" when there is none).
func aclOwner(acl []byte) string {
	if len(acl) == 0 {
		return ""
	}
	parsed, err := auth.ParseACL(acl)
	if err != nil {
		return ""
	}
	return parsed.Owner
}

// mayDo refuses unless the request of ctx may do want to oi.
func mayDo(ctx context.Context, oi objectInfo, want uint32) error {
	id, ok := idOf(ctx)
	if !ok {
		return nil // the gateway's own work
	}
	return id.need(oi, want)
}

// mayReplace refuses unless the request of ctx may replace the object at
// p: a file there must be writable to it.
func (b *braidBackend) mayReplace(ctx context.Context, p string) error {
	if _, ok := idOf(ctx); !ok {
		return nil
	}
	fi, err := b.cl.Stat(ctx, p)
	switch {
	case errors.Is(err, braid.ErrNotFound), errors.Is(err, braid.ErrNotDir):
		return nil // nothing to replace
	case err != nil:
		return s3Error(err, s3err.ErrNoSuchBucket)
	case fi.IsDir:
		return nil // a directory in the way is refused later
	}
	return mayDo(ctx, objectInfo{mode: fi.Mode, uid: fi.Uid, gid: fi.Gid}, mdsproto.MayWrite)
}

// user is the IAM's record of the user of access, if it has one.
func (b *braidBackend) user(access string) (braid.S3User, bool) {
	if b.users == nil {
		return braid.S3User{}, false
	}
	return b.users(access)
}
