package mds

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/kv"
)

// TestKeyRingSharedThroughTheEngine: MDS processes sharing a metadata
// store keep the capability key ring in it, sealed: a successor with its
// own DIR signs with the ring its predecessor rotated to, and one whose
// filekeys.key differs cannot open it.
func TestKeyRingSharedThroughTheEngine(t *testing.T) {
	ctx := context.Background()
	key := testKey(t)
	store := filepath.Join(t.TempDir(), "store")
	start := func(dir string) (*Server, error) {
		eng, err := kv.OpenPebble(store, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Start(ctx, Config{Dir: dir, Listen: "127.0.0.1:0", Key: key, Engine: eng,
			LeadUntil: func() time.Time { return time.Now().Add(time.Hour) }})
		if err != nil {
			eng.Close()
		}
		return s, err
	}
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	first, err := start(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.keys.addPending(); err != nil {
		t.Fatal(err)
	}
	want, wantCur := first.keys.ring.Keys()
	first.Close()
	if len(want) != 2 {
		t.Fatalf("ring after adding a key: %d keys", len(want))
	}
	if _, err := os.Stat(filepath.Join(a, capKeysFile)); !os.IsNotExist(err) {
		t.Fatalf("the ring went to %s too (%v): a successor would not see it", capKeysFile, err)
	}

	b64, err := os.ReadFile(filepath.Join(a, fileKeysFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, fileKeysFile), b64, 0o600); err != nil {
		t.Fatal(err)
	}
	second, err := start(b)
	if err != nil {
		t.Fatal(err)
	}
	got, gotCur := second.keys.ring.Keys()
	second.Close()
	if !maps.EqualFunc(got, want, func(x, y capability.Key) bool { return string(x) == string(y) }) || gotCur != wantCur {
		t.Fatalf("the successor's ring differs: %d keys, current %d; want %d, %d", len(got), gotCur, len(want), wantCur)
	}

	if _, err := start(c); err == nil || !strings.Contains(err.Error(), "filekeys.key") {
		t.Fatalf("an MDS with other filekeys.key: %v, want it refused", err)
	}
}
