package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultClusterKey: braid mds makes DIR/cluster.key for a new store
// only; a store without one is refused, never given a key its OSDs lack.
func TestDefaultClusterKey(t *testing.T) {
	fresh := t.TempDir()
	p, err := defaultClusterKey(fresh)
	if err != nil || p != filepath.Join(fresh, "cluster.key") {
		t.Fatalf("new store: %q %v", p, err)
	}
	made, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	if again, err := defaultClusterKey(fresh); err != nil || again != p {
		t.Fatalf("second start: %q %v", again, err)
	}
	if kept, _ := os.ReadFile(p); string(kept) != string(made) {
		t.Fatal("the second start replaced the key")
	}
	old := t.TempDir()
	if err := os.Mkdir(filepath.Join(old, "meta"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := defaultClusterKey(old); err == nil || !strings.Contains(err.Error(), "--key-file") {
		t.Fatalf("a store without a key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(old, "cluster.key")); !os.IsNotExist(err) {
		t.Fatalf("a key was made for an existing store: %v", err)
	}
}
