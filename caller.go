package braid

import (
	"context"
	"os"

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

// callerFor is who a request made with ctx acts as.
func (c *Client) callerFor(ctx context.Context) Caller {
	if who, ok := ctx.Value(callerKey{}).(Caller); ok {
		return who
	}
	if c.opts.Caller != nil {
		return *c.opts.Caller
	}
	return c.self
}

// defaultCaller is who a client acts as when its options name no one: a
// credential limited to some identities is its first of them; otherwise
// the process's own.
func defaultCaller(cred *Credential) Caller {
	if cred != nil && !cred.Principal.AnyID && len(cred.Principal.UIDs) > 0 && len(cred.Principal.GIDs) > 0 {
		p := cred.Principal
		return Caller{Uid: p.UIDs[0], Gid: p.GIDs[0], Groups: p.GIDs[1:]}
	}
	return processCaller()
}

// processCaller is the process's own identity.
func processCaller() Caller {
	who := Caller{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	if groups, err := os.Getgroups(); err == nil {
		for _, g := range groups {
			if len(who.Groups) < mdsproto.MaxCallerGroups {
				who.Groups = append(who.Groups, uint32(g))
			}
		}
	}
	return who
}
