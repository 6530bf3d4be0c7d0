package fusefs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Names through the mount are the bytes the program gave: open("n\xff")
// and open("n\xfe") are two files (JSON once made both "n\uFFFD"), and
// another mount lists, reads, renames and links them exactly.
func TestNamesAreBytesThroughMount(t *testing.T) {
	c, a := mountCluster(t, 6)
	b := mountAt(t, c)
	names := []string{"n\xff", "n\xfe", "n\xef\xbf\xbd", "a<b>&c\"'", "ctl\x01\x1b[0m\x7f\t", strings.Repeat("\xc3", 255)}
	for i, n := range names {
		if err := os.WriteFile(filepath.Join(a, n), []byte{byte(i)}, 0o644); err != nil {
			t.Fatalf("write %q: %v", n, err)
		}
	}
	for _, m := range []string{a, b} {
		ents, err := os.ReadDir(m)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if want := slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
			t.Fatalf("%s lists %q, want %q", m, got, want)
		}
		for i, n := range names {
			if data, err := os.ReadFile(filepath.Join(m, n)); err != nil || !bytes.Equal(data, []byte{byte(i)}) {
				t.Errorf("%s: %q reads %v, %v; want [%d]", m, n, data, err, i)
			}
		}
	}
	if err := os.Rename(filepath.Join(a, "n\xff"), filepath.Join(a, "m\x80")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("t\xfe\xff", filepath.Join(a, "l\x81")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(b, "l\x81")); err != nil || got != "t\xfe\xff" {
		t.Errorf("readlink from the other mount: %q, %v", got, err)
	}
	if data, err := os.ReadFile(filepath.Join(b, "m\x80")); err != nil || !bytes.Equal(data, []byte{0}) {
		t.Errorf("renamed file from the other mount: %v, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(a, "n\xff")); !os.IsNotExist(err) {
		t.Errorf("old name still there: %v", err)
	}
	if err := unix.Setxattr(filepath.Join(a, "n\xfe"), "user.\xff", []byte{0xfe, 0}, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(b, "n\xfe"), "user.\xff", buf); err != nil || !bytes.Equal(buf[:n], []byte{0xfe, 0}) {
		t.Errorf("xattr from the other mount: %v, %v", buf[:max(n, 0)], err)
	}
}
