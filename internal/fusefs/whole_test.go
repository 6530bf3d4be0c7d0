package fusefs_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/testcluster"
	"golang.org/x/sys/unix"
)

// A small file made in a directory the mount claimed and written in
// order from its start is written whole at its close: its create tells
// the MDS its size, so it is mirrored (a unit per copy, where the
// cluster's coded layout writes a stripe of six units), and the MDS sees
// the flush that carries the create and the open, and one commit that
// ends the lease (no release follows at the kernel's release).
func TestSmallFilesAreWrittenWholeAtClose(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true, DefaultLayout: "ec:4+2"})
	// Creates wait a second to be sent (2 ms by default): a create sent
	// before its close cannot carry the size, and a slow run must not
	// decide what this test sees.
	_, m1 := mountClient(t, c.DialWith(func(o *braid.Options) { o.WriteBackLinger = time.Second }))
	m2 := mountAt(t, c)
	if err := os.Mkdir(filepath.Join(m1, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	osdWrites := func() (n uint64) {
		for _, s := range c.OSDs {
			n += s.Served(osdproto.OpWrite)
		}
		return n
	}
	const files = 8
	archived := time.Unix(1600000000, 123456789)
	want := map[string][]byte{}
	for i := range files {
		name := fmt.Sprintf("f%d", i)
		p := filepath.Join(m1, "d", name)
		data := bytes.Repeat([]byte{byte('a' + i)}, 1000+i*1000)
		writes := osdWrites()
		opens, renews := c.MDS.Served(mdsproto.OpOpen), c.MDS.Served(mdsproto.OpRenew)
		commits := c.MDS.Served(mdsproto.OpCommit)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		half := len(data) / 2
		for _, part := range [][]byte{data[:half], data[half:]} {
			if _, err := f.Write(part); err != nil {
				t.Fatal(err)
			}
		}
		setattrs := c.MDS.Served(mdsproto.OpSetattr)
		if i%2 == 1 { // as tar does before close: the times, owner and mode ride on the create
			if err := os.Chtimes(p, archived, archived); err != nil {
				t.Fatal(err)
			}
			if err := f.Chown(1000+i, 2000+i); err != nil {
				t.Fatal(err)
			}
			if err := f.Chmod(0o600); err != nil {
				t.Fatal(err)
			}
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() != int64(len(data)) {
			t.Fatalf("%s: fstat before close says %d bytes, want %d", name, st.Size(), len(data))
		}
		if n := c.MDS.Served(mdsproto.OpSetattr) - setattrs; n != 0 {
			t.Errorf("%s: %d setattrs at the MDS, want none (the create was not sent yet)", name, n)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if got := mustXattr(t, p, mdsproto.LayoutXattr); !strings.HasPrefix(got, "mirror:3") {
			t.Errorf("%s: layout %q, want a mirrored one (mirror:3)", name, got)
		}
		if n := osdWrites() - writes; n != 3 {
			t.Errorf("%s: %d unit writes, want 3 (one per copy)", name, n)
		}
		if n := c.MDS.Served(mdsproto.OpOpen) - opens; n != 0 {
			t.Errorf("%s: %d opens, want none (the open rides on the create's flush)", name, n)
		}
		if n := c.MDS.Served(mdsproto.OpCommit) - commits; n != 1 {
			t.Errorf("%s: %d commits, want 1", name, n)
		}
		if n := c.MDS.Served(mdsproto.OpRenew) - renews; n != 0 {
			t.Errorf("%s: %d lease requests, want none (the commit released the lease)", name, n)
		}
		want[name] = data
	}
	for name, data := range want { // read last: the other mount's reads recall the claim
		p := filepath.Join(m2, "d", name)
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s through the other mount: %d bytes (%v), want %d", name, len(got), err, len(data))
		}
		i := int(name[1] - '0')
		st := statOf(t, p)
		mode, uid, gid := uint32(0o644), uint32(0), uint32(0)
		if i%2 == 1 {
			mode, uid, gid = 0o600, uint32(1000+i), uint32(2000+i)
		}
		if st.Mode&0o7777 != mode || st.Uid != uid || st.Gid != gid {
			t.Errorf("%s through the other mount: mode %o owner %d:%d, want %o %d:%d", name, st.Mode&0o7777, st.Uid, st.Gid, mode, uid, gid)
		}
		if mtime := time.Unix(st.Mtim.Sec, st.Mtim.Nsec); i%2 == 1 && !mtime.Equal(archived) {
			t.Errorf("%s through the other mount: mtime %v, want %v as set before close", name, mtime, archived)
		}
	}
}

// Whatever needs a file whose bytes a handle keeps for its close writes
// them out first, so the file reads and changes as a local one would:
// a read through the same descriptor or another, fsync, truncation, a
// write out of order or past the size kept, an unlink while open.
func TestKeptBytesAreWrittenBeforeAnythingElse(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true, DefaultLayout: "ec:4+2"})
	m1, m2 := mountAt(t, c), mountAt(t, c)
	data := bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB
	cases := []struct {
		name string
		do   func(t *testing.T, f *os.File, p string) []byte // after data was written; returns the expected content
	}{
		{"read through the same descriptor", func(t *testing.T, f *os.File, p string) []byte {
			got := make([]byte, len(data))
			if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %q (%v)", got[:16], err)
			}
			return data
		}},
		{"read through another descriptor", func(t *testing.T, f *os.File, p string) []byte {
			if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes (%v), want %d", len(got), err, len(data))
			}
			return data
		}},
		{"fsync", func(t *testing.T, f *os.File, p string) []byte {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if got, err := os.ReadFile(filepath.Join(m2, filepath.Base(filepath.Dir(p)), "k")); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("the other mount read %d bytes after fsync (%v), want %d", len(got), err, len(data))
			}
			return data
		}},
		{"truncate", func(t *testing.T, f *os.File, p string) []byte {
			if err := f.Truncate(100); err != nil {
				t.Fatal(err)
			}
			return data[:100]
		}},
		{"write out of order", func(t *testing.T, f *os.File, p string) []byte {
			if _, err := f.WriteAt([]byte("XY"), 10); err != nil {
				t.Fatal(err)
			}
			return append(append(bytes.Clone(data[:10]), "XY"...), data[12:]...)
		}},
		{"write past the size kept", func(t *testing.T, f *os.File, p string) []byte {
			big := bytes.Repeat([]byte("z"), 64<<10)
			if _, err := f.Write(big); err != nil {
				t.Fatal(err)
			}
			return append(bytes.Clone(data), big...)
		}},
		{"unlink while open", func(t *testing.T, f *os.File, p string) []byte {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(data))
			if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back after unlink %q (%v)", got[:16], err)
			}
			return nil
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A directory each: the other mount's reads recall its claim.
			dir := fmt.Sprintf("d%d", i)
			if err := os.Mkdir(filepath.Join(m1, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(m1, dir, "k")
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			want := tc.do(t, f, p)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(m2, dir, "k"))
			if want == nil {
				if !os.IsNotExist(err) {
					t.Fatalf("the other mount reads a file unlinked: %v", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the other mount read %d bytes (%v), want %d", len(got), err, len(want))
			}
		})
	}
}

func mustXattr(t *testing.T, p, name string) string {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Getxattr(p, name, buf)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", p, name, err)
	}
	return string(buf[:n])
}

// A file's times set between its last write and its close (tar does so)
// stay as set: the close's commit does not move them to the time of the
// close. Before, it did, for every file written through the mount.
func TestTimesSetBeforeCloseStay(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6, Pack: true})
	m := mountAt(t, c)
	archived := time.Unix(1600000000, 0)
	for _, size := range []int{3000, 200 << 10} { // kept until close, and written as it comes
		p := filepath.Join(m, fmt.Sprintf("f%d", size))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(bytes.Repeat([]byte("t"), size)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, archived, archived); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if got := time.Unix(statOf(t, p).Mtim.Sec, statOf(t, p).Mtim.Nsec); !got.Equal(archived) {
			t.Errorf("%d bytes: mtime %v after close, want %v as set before it", size, got, archived)
		}
	}
}
