package mds

// Who may ask what: every MDS operation against every role. A server
// without a credential (Config.Credential nil, the Go API's tests and the
// simulation) is open; the command line never runs one.

import (
	"context"
	"strconv"
	"sync"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

type roleSet uint8

const (
	rMDS roleSet = 1 << iota
	rOSD
	rHealer
	rGateway
	rAdmin
	rClient

	rAll     = rMDS | rOSD | rHealer | rGateway | rAdmin | rClient
	rUsers   = rMDS | rHealer | rGateway | rAdmin | rClient // those who use the namespace
	rRepair  = rMDS | rOSD | rHealer                        // who claims repairs and marks what they found
	rAdmins  = rMDS | rAdmin                                // cluster administration
	rSigners = rMDS | rGateway                              // who learns S3 users' signing keys
)

var roleBits = map[string]roleSet{
	auth.RoleMDS: rMDS, auth.RoleOSD: rOSD, auth.RoleHealer: rHealer,
	auth.RoleGateway: rGateway, auth.RoleAdmin: rAdmin, auth.RoleClient: rClient,
}

// opRoles is the authorization table. Operations that take further
// checks (which file, which path) name them in authorizeReq.
var opRoles = map[uint16]roleSet{
	mdsproto.OpHeartbeat: rOSD,

	// The namespace and files: POSIX permissions decide further.
	mdsproto.OpLookup: rUsers, mdsproto.OpMkdir: rUsers, mdsproto.OpCreate: rUsers,
	mdsproto.OpOpen: rUsers, mdsproto.OpCommit: rUsers, mdsproto.OpReaddir: rUsers,
	mdsproto.OpRemove: rUsers, mdsproto.OpRename: rUsers, mdsproto.OpGetLayout: rUsers,
	mdsproto.OpSetattr: rUsers, mdsproto.OpLink: rUsers, mdsproto.OpSymlink: rUsers,
	mdsproto.OpXattr: rUsers, mdsproto.OpMknod: rUsers, mdsproto.OpStat: rUsers,
	mdsproto.OpStatfs: rAll, mdsproto.OpStatus: rAll,
	mdsproto.OpIntentBegin: rUsers, mdsproto.OpIntentCommit: rUsers, mdsproto.OpIntentDone: rUsers,
	mdsproto.OpRenew: rUsers, mdsproto.OpRenewBatch: rUsers,
	mdsproto.OpExtentLock: rUsers, mdsproto.OpExtentRelease: rUsers, mdsproto.OpLockWait: rUsers,
	mdsproto.OpExtentReclaim: rUsers, mdsproto.OpCacheWait: rUsers, mdsproto.OpCacheLookup: rUsers,
	// Layouts of directories; the root's is the cluster's (authorizeReq).
	mdsproto.OpSetLayout: rUsers,
	// A reader that meets a corrupt file asks for its scrub by inode;
	// a scrub of a tree is the administrator's (authorizeReq).
	mdsproto.OpScrub: rUsers,
	// Dirty marks: repairers, and writers of the file (markDirty).
	mdsproto.OpMarkDirty: rRepair | rClient | rGateway | rAdmin,

	mdsproto.OpRepairClaim: rRepair, mdsproto.OpRepairDone: rRepair,
	mdsproto.OpOSDDrain: rAdmins, mdsproto.OpOSDRemove: rAdmins, mdsproto.OpRecover: rAdmins,
	// Gateways list users (names and access keys; secrets never leave
	// S3UserAdd's answer) to name buckets' owners.
	mdsproto.OpS3UserAdd: rAdmins, mdsproto.OpS3UserList: rAdmins | rGateway, mdsproto.OpS3UserRemove: rAdmins,
	mdsproto.OpS3SigningKey: rSigners,
	mdsproto.OpKeyRotate:    rAdmins,
}

type principalKey struct{}

// principal is who sent the request in ctx; ok is false on an open
// server.
func principal(ctx context.Context) (auth.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(auth.Principal)
	return p, ok
}

// authenticate notes the request's principal in its context. On a
// server with a credential, a connection without a verified one never
// gets here (its TLS handshake failed); this refuses one anyway.
func (s *Server) authenticate(ctx context.Context) (context.Context, error) {
	if s.cfg.Credential == nil {
		return ctx, nil
	}
	p, err := auth.PeerOf(wire.PeerTLS(ctx))
	if err != nil {
		return ctx, wire.Errorf(wire.ErrDenied, "%v", err)
	}
	return context.WithValue(ctx, principalKey{}, p), nil
}

// authorize checks the table for op.
func (s *Server) authorize(ctx context.Context, op uint16) error {
	p, ok := principal(ctx)
	if !ok {
		return nil
	}
	allowed, known := opRoles[op]
	if !known {
		return wire.Errorf(wire.ErrUnknownOp, "mds op %d", op)
	}
	if allowed&roleBits[p.Role] == 0 {
		return wire.Errorf(wire.ErrDenied, "%s may not %s", p, opName(op))
	}
	return nil
}

// requireRole refuses a request in ctx unless its principal has one of
// roles (open servers refuse nothing).
func requireRole(ctx context.Context, roles roleSet, what string) error {
	p, ok := principal(ctx)
	if !ok || roles&roleBits[p.Role] != 0 {
		return nil
	}
	return wire.Errorf(wire.ErrDenied, "%s may not %s", p, what)
}

var opNames = map[uint16]string{
	mdsproto.OpHeartbeat:     "heartbeat",
	mdsproto.OpLookup:        "look up names",
	mdsproto.OpMkdir:         "make directories",
	mdsproto.OpCreate:        "create files",
	mdsproto.OpOpen:          "open files",
	mdsproto.OpCommit:        "commit writes",
	mdsproto.OpReaddir:       "list directories",
	mdsproto.OpRemove:        "remove names",
	mdsproto.OpRename:        "rename",
	mdsproto.OpSetLayout:     "set layouts",
	mdsproto.OpGetLayout:     "read layouts",
	mdsproto.OpStatus:        "read the cluster status",
	mdsproto.OpMarkDirty:     "mark components dirty",
	mdsproto.OpRepairClaim:   "claim repairs",
	mdsproto.OpRepairDone:    "report repairs",
	mdsproto.OpScrub:         "request scrubs",
	mdsproto.OpOSDDrain:      "drain OSDs",
	mdsproto.OpOSDRemove:     "remove OSDs",
	mdsproto.OpIntentBegin:   "begin partial-stripe writes",
	mdsproto.OpIntentCommit:  "commit partial-stripe writes",
	mdsproto.OpIntentDone:    "finish partial-stripe writes",
	mdsproto.OpRenew:         "renew leases",
	mdsproto.OpRecover:       "recover metadata",
	mdsproto.OpSetattr:       "set attributes",
	mdsproto.OpLink:          "make hard links",
	mdsproto.OpSymlink:       "make symlinks",
	mdsproto.OpXattr:         "use extended attributes",
	mdsproto.OpStatfs:        "read file system statistics",
	mdsproto.OpS3UserAdd:     "add S3 users",
	mdsproto.OpS3UserList:    "list S3 users",
	mdsproto.OpS3UserRemove:  "remove S3 users",
	mdsproto.OpS3SigningKey:  "fetch S3 signing keys",
	mdsproto.OpExtentLock:    "lock extents",
	mdsproto.OpExtentRelease: "release extents",
	mdsproto.OpLockWait:      "wait for extent locks",
	mdsproto.OpExtentReclaim: "reclaim extents",
	mdsproto.OpMknod:         "make special files",
	mdsproto.OpStat:          "stat",
	mdsproto.OpRenewBatch:    "renew leases",
	mdsproto.OpCacheWait:     "cache metadata",
	mdsproto.OpCacheLookup:   "cache metadata",
	mdsproto.OpKeyRotate:     "rotate keys",
}

func opName(op uint16) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return "use mds op " + strconv.Itoa(int(op))
}

// OSD principals. An OSD is bound to the principal whose credential first
// registered it, so one OSD's credential cannot heartbeat for another
// (taking over its address in the cluster map, or keeping a dead one up).
//
//	O/<uuid>   the principal's name
func osdOwnerKey(uuid string) []byte { return append([]byte("O/"), uuid...) }

// osdOwners caches the bindings heartbeats have checked.
type osdOwners struct {
	mu sync.Mutex
	m  map[string]string // uuid → principal name
}

// bindOSD checks that the OSD uuid is the requester's, binding it on
// first sight.
func (s *Server) bindOSD(ctx context.Context, uuid string) error {
	p, ok := principal(ctx)
	if !ok {
		return nil
	}
	s.owners.mu.Lock()
	owner, known := s.owners.m[uuid]
	s.owners.mu.Unlock()
	if !known {
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			b, err := tx.Get(osdOwnerKey(uuid))
			if err != nil || b != nil {
				owner = string(b)
				return err
			}
			owner = p.Name
			return tx.Put(osdOwnerKey(uuid), []byte(p.Name))
		})
		if err != nil {
			return err
		}
		s.owners.mu.Lock()
		if s.owners.m == nil {
			s.owners.m = map[string]string{}
		}
		if len(s.owners.m) < maxOSDOwnersCached {
			s.owners.m[uuid] = owner
		}
		s.owners.mu.Unlock()
	}
	if owner != p.Name {
		return wire.Errorf(wire.ErrDenied, "OSD %s is %q's; %s may not heartbeat for it", uuid, owner, p)
	}
	return nil
}

// maxOSDOwnersCached bounds the cache of OSD bindings.
const maxOSDOwnersCached = 65536
