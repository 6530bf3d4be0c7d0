package mds

import (
	"context"
	"testing"
)

// Every concern of the MDS writes through the one engine that recalls
// metadata caches (coherentEngine): a concern left on the raw engine
// would change cached inodes (a repair lock, a dirty mark) without a
// recall, and a client would read its stale copy.
func TestConcernsShareTheCoherentEngine(t *testing.T) {
	s, err := Start(context.Background(), Config{Dir: t.TempDir(), Listen: "127.0.0.1:0", Key: testKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.kv.(*coherentEngine); !ok {
		t.Fatalf("the MDS writes through %T, not the coherent engine", s.kv)
	}
	for name, e := range map[string]any{"S3 users": s.s3.kv, "GC": s.gc.kv, "repair queue": s.repairs.kv, "extent locks": s.locks.kv, "caches": s.caches.kv, "labels": s.labels.kv, "intents": s.intents.kv, "members": s.members.kv, "router": s.router.kv} {
		if e != s.kv {
			t.Errorf("%s write through %T, not the MDS's engine", name, e)
		}
	}
}
