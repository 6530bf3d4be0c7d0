package mds

import (
	"context"
	"testing"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// handleOp sends req as op straight to s's handler (no connection, no
// credential) and decodes the answer into out, unless out is nil.
func handleOp(t testing.TB, s *Server, op uint16, req, out any) error {
	t.Helper()
	body, err := mdsproto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.handle(context.Background(), &wire.Request{Op: op, Meta: body})
	if err == nil && out != nil {
		err = mdsproto.Unmarshal(resp.Meta, out)
	}
	return err
}

// testKey is a new cluster key.
func testKey(t testing.TB) capability.Key {
	t.Helper()
	key, err := capability.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}
