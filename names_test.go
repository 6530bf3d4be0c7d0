package braid_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// oddNames are names POSIX allows that a text encoding would change:
// bytes that are not UTF-8 (two that one replacement character would
// merge, and the replacement character itself), characters markup
// escapes, control characters, and the longest name of bytes that are
// not UTF-8.
var oddNames = []string{
	"n\xff",
	"n\xfe",
	"n\xef\xbf\xbd", // U+FFFD itself
	"a<b>&c\"'",
	"ctl\x01\x1b[0m\x7f\t\n",
	strings.Repeat("\xc3", 255),
	"plain",
}

// Names are bytes: every name without '/' or NUL, up to 255 bytes,
// comes back exactly as it was given, and two names are two files.
func TestNamesAreBytes(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	if err := cl.Mkdir(ctx, "/d", false); err != nil {
		t.Fatal(err)
	}
	for i, n := range oddNames {
		put(t, cl, "/d/"+n, "", []byte{byte(i), 'x'})
	}
	ents, err := cl.ReadDir(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name)
	}
	want := slices.Sorted(slices.Values(oddNames))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
	for i, n := range oddNames {
		data, err := get(t, cl, "/d/"+n)
		if err != nil || !bytes.Equal(data, []byte{byte(i), 'x'}) {
			t.Errorf("%q: read %q, %v; want its own data", n, data, err)
		}
		if fi, err := cl.Stat(ctx, "/d/"+n); err != nil || fi.Name != n {
			t.Errorf("stat %q: name %q, %v", n, fi.Name, err)
		}
	}

	// Rename between two names a text encoding would merge, a symlink
	// whose target is not UTF-8, an extended attribute named so.
	if err := cl.Rename(ctx, "/d/n\xff", "/d/m\xfe"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Stat(ctx, "/d/n\xff"); err == nil {
		t.Errorf("n\\xff still there after its rename")
	}
	if data, err := get(t, cl, "/d/m\xfe"); err != nil || data[0] != 0 {
		t.Errorf("renamed file: %q, %v", data, err)
	}
	d, err := cl.Stat(ctx, "/d")
	if err != nil {
		t.Fatal(err)
	}
	target := "../t\xff\xfe<"
	if _, err := cl.Symlink(ctx, d.Ino, "l\x80", target, 0, 0); err != nil {
		t.Fatal(err)
	}
	attr, err := cl.LookupAt(ctx, d.Ino, "l\x80")
	if err != nil || attr.Target != target {
		t.Errorf("symlink l\\x80: target %q, %v; want %q", attr.Target, err, target)
	}
	f, err := cl.Stat(ctx, "/d/plain")
	if err != nil {
		t.Fatal(err)
	}
	xname, xval := "user.\xff\x01", []byte{0xff, 0, 0xfe}
	if _, err := cl.Xattr(ctx, braid.XattrRequest{Ino: f.Ino, Op: "set", Name: xname, Value: xval}); err != nil {
		t.Fatal(err)
	}
	xs, err := cl.Xattr(ctx, braid.XattrRequest{Ino: f.Ino, Op: "list"})
	if err != nil || !slices.Contains(xs.Names, xname) {
		t.Errorf("xattr names %q, %v; want %q among them", xs.Names, err, xname)
	}
	x, err := cl.Xattr(ctx, braid.XattrRequest{Ino: f.Ino, Op: "get", Name: xname})
	if err != nil || !bytes.Equal(x.Value, xval) {
		t.Errorf("xattr %q: %q, %v", xname, x.Value, err)
	}
}

// A listing is paged by bytes: a directory of 300 symlinks with 255-byte
// names and 4,000-byte targets (1.3 MB of entries, past the 1 MiB frame)
// lists completely, and no page is cut.
func TestListingPagedByBytes(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 3})
	cl := c.Dial()
	if err := cl.Mkdir(ctx, "/big", false); err != nil {
		t.Fatal(err)
	}
	d, err := cl.Stat(ctx, "/big")
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	want := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("%03d%s", i, strings.Repeat("<", 252))
		if _, err := cl.Symlink(ctx, d.Ino, name, strings.Repeat("t", 4000), 0, 0); err != nil {
			t.Fatal(err)
		}
		want[name] = true
	}
	ents, err := cl.ReadDir(ctx, "/big")
	if err != nil {
		t.Fatalf("listing: %v", err)
	}
	for _, e := range ents {
		if !want[e.Name] {
			t.Fatalf("listed %q: not created, or listed twice", e.Name)
		}
		delete(want, e.Name)
	}
	if len(want) > 0 {
		t.Fatalf("%d of %d entries not listed", len(want), n)
	}
}
