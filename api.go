package braid

import (
	"context"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/checker"
	"github.com/braidfs/braid/internal/client"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/repairworker"
	"github.com/braidfs/braid/internal/wire"
)

// Errors a caller may test with errors.Is.
var (
	ErrNotFound    error = wire.ErrNotFound
	ErrExists      error = wire.ErrExists
	ErrNotDir      error = wire.ErrNotDir
	ErrIsDir       error = wire.ErrIsDir
	ErrNotEmpty    error = wire.ErrNotEmpty
	ErrNoSpace     error = wire.ErrNoSpace
	ErrCorrupt     error = wire.ErrCorrupt
	ErrDenied      error = wire.ErrDenied
	ErrUnavailable error = wire.ErrUnavail
	ErrInvalid     error = wire.ErrInvalid
	ErrNameTooLong error = wire.ErrNameTooLong
	ErrNoData      error = wire.ErrNoData
	ErrPerm        error = wire.ErrPerm
	ErrBusy        error = wire.ErrBusy
	ErrTooBig      error = wire.ErrTooBig
	ErrOverflow    error = wire.ErrOverflow // an answer too large for one frame
	ErrLost        error = wire.ErrLost
	ErrProtocol    error = wire.ErrProtocol // the server speaks no version this client does, or is not what was asked for
	ErrBadLayout   error = layout.ErrBadSpec
)

// Options tune a client (see the fields' documentation in
// internal/client).
type Options = client.Options

// DefaultOptions suit a client on a small machine.
var DefaultOptions = client.DefaultOptions

// CreateOptions choose how a new file is made.
type CreateOptions = client.CreateOptions

// FileInfo describes a file, directory, symlink or special file.
type FileInfo = client.FileInfo

// Layout is a file's placed layout, Component one object of it, and
// LayoutInfo what `braid layout get` shows.
type (
	Layout     = client.Layout
	Component  = client.Component
	LayoutInfo = client.LayoutInfo
)

// HealOptions configure Heal's repair workers.
type HealOptions = repairworker.Options

// CheckReport is what Check found; CheckOptions tune CheckTree.
type (
	CheckReport  = checker.Report
	CheckOptions = checker.Options
)

// Status is the cluster map and capacity; PendingDelete the space removed
// files still hold (Status.PendingDelete).
type (
	Status        = mdsproto.StatusResp
	PendingDelete = mdsproto.PendingDelete
)

// RecoverResult is what RecoverMetadata restored.
type RecoverResult = mdsproto.RecoverResp

// The inode-addressed API, for gateways that hold inodes rather than paths
// (the FUSE mount): entries are named by their directory's ino and a name,
// so a concurrent rename of an ancestor cannot redirect an operation.

// Attr is an inode's attributes as the MDS keeps them.
type Attr = mdsproto.Inode

// SetAttrRequest changes attributes; nil fields are left alone.
type SetAttrRequest = mdsproto.SetattrReq

// XattrRequest and XattrResult carry extended-attribute operations.
type (
	XattrRequest = mdsproto.XattrReq
	XattrResult  = mdsproto.XattrResp
	StatfsResult = mdsproto.StatfsResp
	DirEntry     = mdsproto.DirEntry
)

// Inode types in Attr.Type.
const (
	TypeFile     = mdsproto.TypeFile
	TypeDir      = mdsproto.TypeDir
	TypeSymlink  = mdsproto.TypeSymlink
	TypeFIFO     = mdsproto.TypeFIFO
	TypeSocket   = mdsproto.TypeSocket
	TypeCharDev  = mdsproto.TypeCharDev
	TypeBlockDev = mdsproto.TypeBlockDev
	LayoutXattr  = mdsproto.LayoutXattr
)

// RootIno is the root directory's inode number.
const RootIno = 1

// IsSpecial reports whether typ is a FIFO, socket or device node: an
// inode only, whose I/O the kernel serves.
func IsSpecial(typ string) bool { return mdsproto.IsSpecial(typ) }

// KilledOnWrite is what a write by a user without CAP_FSETID clears from
// the mode of a file of group gid (set-user-ID, set-group-ID as Linux
// says); SetAttrRequest.KillSuidgid applies it at the MDS.
func KilledOnWrite(mode, gid uint32, writerGroups []uint32) uint32 {
	return mdsproto.KilledOnWrite(mode, gid, writerGroups)
}

// Caller is an identity the MDS checks POSIX permissions for: a uid, a
// primary gid and supplementary groups.
type Caller = mdsproto.Caller

// WithCaller makes requests made with ctx act as who (a server acting
// for many users, as a FUSE mount does for its kernel's callers).
func WithCaller(ctx context.Context, who Caller) context.Context {
	return client.WithCaller(ctx, who)
}

// Credential is who a client is to the cluster's MDS: a certificate and
// key issued by the cluster's CA (`braid cred issue`), and that CA.
type Credential = auth.Credential

// LoadCredential reads a credential file (0600; PEM: certificate, key,
// CA certificate).
func LoadCredential(path string) (*Credential, error) { return auth.LoadCredential(path) }

// S3User is an access key of the S3 gateway (SecretKey is set only in
// the answer to S3UserAdd: the MDS never hands it out again); S3UserSpec
// is a new S3 user: its name and the identity it acts as (nil Uid: the
// next of the S3 users' own range; nil Gid: the uid).
type (
	S3User     = mdsproto.S3User
	S3UserSpec = mdsproto.S3UserReq
)
