package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWithItsMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	// A stale temporary file, readable by all, from a crash mid-write.
	if err := os.WriteFile(path+".tmp", []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"one", "two"} {
		if err := WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		fi, _ := os.Stat(path)
		if err != nil || string(b) != content || fi.Mode().Perm() != 0o600 {
			t.Fatalf("after writing %q: %q, mode %v, %v", content, b, fi.Mode().Perm(), err)
		}
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}
}

func TestCreateFileNeverOverwrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ca.key")
	if err := CreateFile(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CreateFile(path, []byte("second"), 0o600); !errors.Is(err, os.ErrExist) {
		t.Fatalf("second create: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "first" {
		t.Fatalf("content %q", b)
	}
}
