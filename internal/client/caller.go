package client

import (
	"context"

	"github.com/braidfs/braid/internal/mdsproto"
)

// Caller is an identity the MDS checks POSIX permissions for: a uid, a
// primary gid and supplementary groups.
type Caller = mdsproto.Caller

type callerKey struct{}

// WithCaller makes requests made with ctx act as who (a server acting
// for many users, as a FUSE mount does for its kernel's callers).
func WithCaller(ctx context.Context, who Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, who)
}

// callerFor is who a request made with ctx acts as, if the client names
// anyone: WithCaller's, else Options.Caller, else a limited credential's
// own identity. A client that names no one is, to the MDS, root if its
// credential may act as anyone (a mount or gateway, which check their
// own callers; the administrator), and nobody otherwise.
func (c *Client) callerFor(ctx context.Context) (Caller, bool) {
	if who, ok := ctx.Value(callerKey{}).(Caller); ok {
		return who, true
	}
	if c.opts.Caller != nil {
		return *c.opts.Caller, true
	}
	return c.self, c.hasSelf
}

// defaultCaller is the identity of a credential limited to some: its
// first uid and its gids.
func defaultCaller(cred *Credential) (Caller, bool) {
	if cred == nil || cred.Principal.AnyID || len(cred.Principal.UIDs) == 0 || len(cred.Principal.GIDs) == 0 {
		return Caller{}, false
	}
	p := cred.Principal
	return Caller{Uid: p.UIDs[0], Gid: p.GIDs[0], Groups: p.GIDs[1:]}, true
}
