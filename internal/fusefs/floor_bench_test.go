package fusefs_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/braidfs/braid/internal/testcluster"
)

// BenchmarkSmallWrites is 4 KiB writes (pwrite) at random 4 KiB-aligned
// places of a 64 MiB file, nothing synced, three ways in one run: to a
// local file; through a FUSE file system that does nothing (go-fuse,
// direct I/O as braid's writers use, so each write is one round trip to
// the daemon and back): the floor any FUSE file system pays for such a
// write on this machine; and through a braid mount. ns/op is one write.
// The README compares them with a local directory's whole fio job.
func BenchmarkSmallWrites(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root (FUSE mounts)")
	}
	const fileBytes, writeBytes = 64 << 20, 4096
	for _, where := range []string{"local", "null-fuse", "braid"} {
		b.Run(where, func(b *testing.B) {
			var path string
			switch where {
			case "local":
				path = filepath.Join(b.TempDir(), "f")
			case "null-fuse":
				path = filepath.Join(mountNull(b), nullName)
			case "braid":
				c := testcluster.Start(b, testcluster.Options{OSDs: 6})
				path = filepath.Join(mountAt(b, c), "f")
			}
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			rng := rand.New(rand.NewPCG(1, 2))
			p := make([]byte, writeBytes)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			b.SetBytes(writeBytes)
			b.ResetTimer()
			for range b.N {
				if _, err := f.WriteAt(p, rng.Int64N(fileBytes/writeBytes)*writeBytes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

const nullName = "f"

// nullFile is a file whose writes do nothing: what is left of a write
// through it is FUSE's own cost.
type nullFile struct{ fs.Inode }

type nullHandle struct{}

func (*nullFile) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nullHandle{}, fuse.FOPEN_DIRECT_IO, 0
}

func (*nullFile) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	return 0
}

func (nullHandle) Write(_ context.Context, p []byte, _ int64) (uint32, syscall.Errno) {
	return uint32(len(p)), 0
}

type nullRoot struct{ fs.Inode }

func (r *nullRoot) OnAdd(ctx context.Context) {
	r.AddChild(nullName, r.NewPersistentInode(ctx, &nullFile{}, fs.StableAttr{Mode: syscall.S_IFREG}), false)
}

// mountNull mounts a directory holding one null file, with the options
// braid's mount uses for writes.
func mountNull(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	srv, err := fs.Mount(dir, &nullRoot{}, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMount: true, MaxWrite: 1 << 20, DisableSplice: true, Name: "braid-null"}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Unmount() })
	return dir
}
