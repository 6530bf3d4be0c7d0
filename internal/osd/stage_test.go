package osd

import (
	"bytes"
	"errors"
	"github.com/braidfs/braid/internal/osdproto"
	"os"
	"path/filepath"
	"testing"

	"github.com/braidfs/braid/internal/wire"
)

func readAll(t *testing.T, s *Store, k ObjKey, ver uint64, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	if _, _, err := s.Read(k, ver, 0, buf); err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestStageApplyAbort(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	k := ObjKey{Ino: 3, Comp: 1}
	old := bytes.Repeat([]byte("o"), 10000)
	if _, err := s.Write(k, 1, 0, old, osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	patch := bytes.Repeat([]byte("n"), 5000)
	if err := s.Stage(k, 1, 77, 3000, patch); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, k, 1, 10000); !bytes.Equal(got, old) {
		t.Fatal("staging changed the object")
	}
	if created, err := s.Apply(k, 1, 77, 0); err != nil || created {
		t.Fatalf("apply: created %v, %v", created, err)
	}
	want := append(append(append([]byte{}, old[:3000]...), patch...), old[8000:]...)
	if got := readAll(t, s, k, 1, 10000); !bytes.Equal(got, want) {
		t.Fatal("apply did not write the staged bytes")
	}
	if _, err := s.Apply(k, 1, 77, 0); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("second apply: %v, want ErrNotFound", err)
	}
	// Abort drops a stage without touching the object.
	if err := s.Stage(k, 1, 78, 0, []byte("zzz")); err != nil {
		t.Fatal(err)
	}
	if err := s.Abort(k, 78); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 78, 0); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("apply after abort: %v", err)
	}
	if got := readAll(t, s, k, 1, 10000); !bytes.Equal(got, want) {
		t.Fatal("abort changed the object")
	}
	// A writer fenced by a newer layout cannot stage.
	if err := s.Sync(k, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Stage(k, 1, 79, 0, []byte("x")); !errors.Is(err, wire.ErrStale) {
		t.Fatalf("stage under an old version: %v, want ErrStale", err)
	}
}

func TestDamagedStageRefused(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, OSFS{}, dir)
	k := ObjKey{Ino: 4, Comp: 0}
	if err := s.Stage(k, 1, 5, 0, bytes.Repeat([]byte("d"), 8192)); err != nil {
		t.Fatal(err)
	}
	p := s.stagePath(k, 5)
	b, _ := os.ReadFile(p)
	b[stageHeaderBytes+100] ^= 1
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(k, 1, 5, 0); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("apply of a damaged stage: %v, want ErrCorrupt", err)
	}
	// Deleting the object removes its stages too.
	if _, err := s.Write(k, 1, 0, []byte("x"), osdproto.FlagSync); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(k, 1); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "*.stg")); len(m) != 0 {
		t.Fatalf("stage files left after delete: %v", m)
	}
}
