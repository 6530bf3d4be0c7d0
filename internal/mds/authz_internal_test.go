package mds

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// The authorization table, written out as the rules say it, op by op and
// role by role: administration needs an administrator, repair claims the
// repairers, S3 signing keys a gateway, heartbeats an OSD; the namespace
// is for everyone but OSDs.
func TestAuthorizationTable(t *testing.T) {
	all := auth.Roles
	users := []string{auth.RoleMDS, auth.RoleHealer, auth.RoleGateway, auth.RoleAdmin, auth.RoleClient}
	admins := []string{auth.RoleMDS, auth.RoleAdmin}
	want := map[uint16][]string{
		mdsproto.OpHeartbeat:    {auth.RoleOSD},
		mdsproto.OpOSDDrain:     admins,
		mdsproto.OpOSDRemove:    admins,
		mdsproto.OpRecover:      admins,
		mdsproto.OpS3UserAdd:    admins,
		mdsproto.OpS3UserList:   {auth.RoleMDS, auth.RoleAdmin, auth.RoleGateway},
		mdsproto.OpS3UserRemove: admins,
		mdsproto.OpRepairAssign: {auth.RoleMDS, auth.RoleOSD, auth.RoleHealer},
		mdsproto.OpRepairDone:   {auth.RoleMDS, auth.RoleOSD, auth.RoleHealer},
		mdsproto.OpS3SigningKey: {auth.RoleMDS, auth.RoleGateway},
		mdsproto.OpKeyRotate:    admins,
		mdsproto.OpStatus:       all,
		mdsproto.OpStatfs:       all,
		mdsproto.OpRoute:        all,
		mdsproto.OpMarkDirty:    all, // and further: only a file's writers or repairers (markDirty)
	}
	s := &Server{}
	for op := mdsproto.OpHeartbeat; op <= mdsproto.OpDirFlush; op++ {
		allowed, ok := want[op]
		if !ok {
			allowed = users
		}
		for _, role := range all {
			ctx := context.WithValue(context.Background(), principalKey{}, auth.Principal{Name: "p", Role: role})
			err := s.authorize(ctx, op)
			may := false
			for _, r := range allowed {
				may = may || r == role
			}
			switch {
			case may && err != nil:
				t.Errorf("%s refused %s: %v", role, opName(op), err)
			case !may && (!errors.Is(err, wire.ErrDenied) || !strings.Contains(err.Error(), "may not")):
				t.Errorf("%s allowed to %s (err %v)", role, opName(op), err)
			}
		}
	}
	ctx := context.WithValue(context.Background(), principalKey{}, auth.Principal{Name: "p", Role: auth.RoleAdmin})
	if err := s.authorize(ctx, mdsproto.OpDirFlush+1); !errors.Is(err, wire.ErrUnknownOp) {
		t.Errorf("an op past the table: %v", err)
	}
	if err := s.authorize(context.Background(), mdsproto.OpOSDDrain); err != nil {
		t.Errorf("an open server refused: %v", err)
	}
}
