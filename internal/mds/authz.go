package mds

// Who may ask what: every MDS operation against every role. A server
// without a credential (Config.Credential nil, the Go API's tests and the
// simulation) is open; the command line never runs one.

import (
	"context"
	"strconv"
	"sync"

	"github.com/braidfs/braid/internal/auth"
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
	rRepair  = rMDS | rOSD | rHealer                        // who takes repairs and marks what they found
	rAdmins  = rMDS | rAdmin                                // cluster administration
	rSigners = rMDS | rGateway                              // who learns S3 users' signing keys
)

var roleBits = map[string]roleSet{
	auth.RoleMDS: rMDS, auth.RoleOSD: rOSD, auth.RoleHealer: rHealer,
	auth.RoleGateway: rGateway, auth.RoleAdmin: rAdmin, auth.RoleClient: rClient,
}

// opRule is who may send an operation, and what it is called in a
// refusal.
type opRule struct {
	roles roleSet
	name  string
}

// opRules is the authorization table. Where the role alone cannot decide
// (which file, which directory) the operation checks further, as its
// comment here says.
var opRules = map[uint16]opRule{
	mdsproto.OpHeartbeat: {rOSD, "heartbeat"},

	// The namespace and files: POSIX permissions decide further.
	mdsproto.OpLookup:        {rUsers, "look up names"},
	mdsproto.OpMkdir:         {rUsers, "make directories"},
	mdsproto.OpCreate:        {rUsers, "create files"},
	mdsproto.OpOpen:          {rUsers, "open files"},
	mdsproto.OpCommit:        {rUsers, "commit writes"},
	mdsproto.OpReaddir:       {rUsers, "list directories"},
	mdsproto.OpRemove:        {rUsers, "remove names"},
	mdsproto.OpRename:        {rUsers, "rename"},
	mdsproto.OpGetLayout:     {rUsers, "read layouts"},
	mdsproto.OpSetattr:       {rUsers, "set attributes"},
	mdsproto.OpLink:          {rUsers, "make hard links"},
	mdsproto.OpSymlink:       {rUsers, "make symlinks"},
	mdsproto.OpXattr:         {rUsers, "use extended attributes"},
	mdsproto.OpMknod:         {rUsers, "make special files"},
	mdsproto.OpStat:          {rUsers, "stat"},
	mdsproto.OpStatfs:        {rAll, "read file system statistics"},
	mdsproto.OpRoute:         {rAll, "read the routing table"},
	mdsproto.OpStatus:        {rAll, "read the cluster status"},
	mdsproto.OpIntentBegin:   {rUsers, "begin partial-stripe writes"},
	mdsproto.OpIntentCommit:  {rUsers, "commit partial-stripe writes"},
	mdsproto.OpIntentDone:    {rUsers, "finish partial-stripe writes"},
	mdsproto.OpRenew:         {rUsers, "renew leases"},
	mdsproto.OpRenewBatch:    {rUsers, "renew leases"},
	mdsproto.OpExtentLock:    {rUsers, "lock extents"},
	mdsproto.OpExtentRelease: {rUsers, "release extents"},
	mdsproto.OpLockWait:      {rUsers, "wait for extent locks"},
	mdsproto.OpExtentReclaim: {rUsers, "reclaim extents"},
	mdsproto.OpCacheWait:     {rUsers, "cache metadata"},
	mdsproto.OpCacheLookup:   {rUsers, "cache metadata"},
	mdsproto.OpDirClaim:      {rUsers, "claim directories"},
	mdsproto.OpDirFlush:      {rUsers, "flush claimed directories"},
	// Layouts of directories; the root's is the administrator's (setLayout).
	mdsproto.OpSetLayout: {rUsers, "set layouts"},
	// A reader that meets a corrupt file asks for its scrub by inode;
	// a scrub of a tree is the administrator's (scrub).
	mdsproto.OpScrub: {rUsers, "request scrubs"},
	// Dirty marks: repairers, and writers of the file (markDirty).
	mdsproto.OpMarkDirty: {rRepair | rClient | rGateway | rAdmin, "mark components dirty"},

	mdsproto.OpRepairAssign: {rRepair, "take repairs"},
	mdsproto.OpRepairDone:   {rRepair, "report repairs"},
	mdsproto.OpOSDDrain:     {rAdmins, "drain OSDs"},
	mdsproto.OpOSDRemove:    {rAdmins, "remove OSDs"},
	mdsproto.OpRecover:      {rAdmins, "recover metadata"},
	// Gateways list users (names and access keys; secrets never leave
	// S3UserAdd's answer) to name buckets' owners.
	mdsproto.OpS3UserAdd:    {rAdmins, "add S3 users"},
	mdsproto.OpS3UserList:   {rAdmins | rGateway, "list S3 users"},
	mdsproto.OpS3UserRemove: {rAdmins, "remove S3 users"},
	mdsproto.OpS3SigningKey: {rSigners, "fetch S3 signing keys"},
	mdsproto.OpKeyRotate:    {rAdmins, "rotate keys"},
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
	rule, known := opRules[op]
	if !known {
		return wire.Errorf(wire.ErrUnknownOp, "mds op %d", op)
	}
	if rule.roles&roleBits[p.Role] == 0 {
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

func opName(op uint16) string {
	if r, ok := opRules[op]; ok {
		return r.name
	}
	return "use mds op " + strconv.Itoa(int(op))
}

// OSD principals. An OSD is bound to the principal whose credential first
// registered it, so one OSD's credential cannot heartbeat for another
// (taking over its address in the cluster map, or keeping a dead one up).
//
//	O/<uuid>   the principal's name

// osdOwners caches the bindings heartbeats have checked.
type osdOwners struct {
	mu sync.Mutex
	m  map[string]string // uuid → principal name
}

// maxOSDOwnersCached bounds the cache of OSD bindings.
const maxOSDOwnersCached = 65536
