package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestModelAgainstLocalDisk applies one long random sequence of operations
// to the braid mount and to a directory on the local disk, and after
// every step compares the errno both returned and, every few steps, the
// whole trees: names, types, sizes, modes, link counts, contents and
// extended attributes. BRAID_SEED replays a run; BRAID_MODEL_STEPS
// lengthens it.
func TestModelAgainstLocalDisk(t *testing.T) {
	seed, steps := seedAndLength(t, "BRAID_MODEL_STEPS", 400)
	_, mnt := mountCluster(t, 6)
	local := t.TempDir()
	xattrs := unix.Setxattr(local, "user.probe", []byte("1"), 0) == nil
	m := &model{t: t, rng: rand.New(rand.NewPCG(seed, 7)), roots: [2]string{local, mnt}, xattrs: xattrs}
	for step := 0; step < steps; step++ {
		what := m.step()
		if os.Getenv("BRAID_MODEL_TRACE") != "" {
			t.Logf("step %d: %s", step, what)
		}
		if t.Failed() {
			t.Fatalf("step %d (%s) diverged; seed %d", step, what, seed)
		}
		if step%10 == 9 || step == steps-1 {
			m.compareTrees(step, what)
			if t.Failed() {
				t.Fatalf("trees differ after step %d (%s); seed %d", step, what, seed)
			}
		}
	}
}

// seedAndLength is a random test's seed (BRAID_SEED replays one) and how
// many steps it runs (countEnv, else def), logged.
func seedAndLength(t *testing.T, countEnv string, def int) (uint64, int) {
	t.Helper()
	seed := rand.Uint64()
	if v, err := strconv.ParseUint(os.Getenv("BRAID_SEED"), 10, 64); err == nil {
		seed = v
	}
	n := def
	if v, err := strconv.Atoi(os.Getenv(countEnv)); err == nil && v > 0 {
		n = v
	}
	t.Logf("seed %d (replay with BRAID_SEED=%d), %d steps", seed, seed, n)
	return seed, n
}

type model struct {
	t      *testing.T
	rng    *rand.Rand
	roots  [2]string // local, braid
	xattrs bool      // the local disk supports user xattrs
}

// names are drawn from a small set so operations collide often.
var modelNames = []string{"a", "b", "c", "d", "e"}

func (m *model) randPath(depth int) string {
	p := modelNames[m.rng.IntN(len(modelNames))]
	for i := 0; i < depth && m.rng.IntN(2) == 0; i++ {
		p = filepath.Join(p, modelNames[m.rng.IntN(len(modelNames))])
	}
	return p
}

// both runs op on the local tree and on the mount and checks that they
// failed (or not) with the same errno.
func (m *model) both(what string, op func(root string) error) {
	m.t.Helper()
	var errs [2]error
	for i, root := range m.roots {
		errs[i] = op(root)
	}
	if e0, e1 := errnoOf(errs[0]), errnoOf(errs[1]); e0 != e1 {
		m.t.Errorf("%s: local disk %v, braid %v", what, errs[0], errs[1])
	}
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO // not a syscall error: always a mismatch with a real one
}

func (m *model) step() string {
	r := m.rng
	p := m.randPath(2)
	switch k := r.IntN(15); {
	case k < 4:
		off := int64(r.IntN(300 << 10))
		data := make([]byte, 1+r.IntN(200<<10))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		flags := os.O_CREATE | os.O_WRONLY
		if r.IntN(4) == 0 {
			flags |= os.O_APPEND
		}
		if r.IntN(6) == 0 {
			flags |= os.O_TRUNC
		}
		what := fmt.Sprintf("write %s +%d at %d flags %#x", p, len(data), off, flags)
		m.both(what, func(root string) error {
			f, err := os.OpenFile(filepath.Join(root, p), flags, 0o644)
			if err != nil {
				return err
			}
			if flags&os.O_APPEND != 0 {
				_, err = f.Write(data)
			} else {
				_, err = f.WriteAt(data, off)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		})
		return what
	case k == 4:
		size := int64(r.IntN(400 << 10))
		what := fmt.Sprintf("truncate %s %d", p, size)
		m.both(what, func(root string) error { return syscall.Truncate(filepath.Join(root, p), size) })
		return what
	case k == 5:
		to := m.randPath(2)
		what := fmt.Sprintf("rename %s %s", p, to)
		m.both(what, func(root string) error { return syscall.Rename(filepath.Join(root, p), filepath.Join(root, to)) })
		return what
	case k == 6:
		to := m.randPath(2)
		what := fmt.Sprintf("link %s %s", p, to)
		m.both(what, func(root string) error { return syscall.Link(filepath.Join(root, p), filepath.Join(root, to)) })
		return what
	case k == 7:
		what := "unlink " + p
		m.both(what, func(root string) error { return syscall.Unlink(filepath.Join(root, p)) })
		return what
	case k == 8:
		what := "mkdir " + p
		m.both(what, func(root string) error { return syscall.Mkdir(filepath.Join(root, p), 0o755) })
		return what
	case k == 9:
		what := "rmdir " + p
		m.both(what, func(root string) error { return syscall.Rmdir(filepath.Join(root, p)) })
		return what
	case k == 10:
		mode := uint32(0o600 + r.IntN(0o200))
		what := fmt.Sprintf("chmod %s %o", p, mode)
		m.both(what, func(root string) error { return syscall.Chmod(filepath.Join(root, p), mode) })
		return what
	case k == 11 && m.xattrs:
		val := []byte(strconv.Itoa(r.IntN(1000)))
		what := fmt.Sprintf("setxattr %s user.k=%s", p, val)
		m.both(what, func(root string) error { return unix.Setxattr(filepath.Join(root, p), "user.k", val, 0) })
		return what
	case k == 12:
		data := []byte(fmt.Sprintf("synced %d\n", r.IntN(1000)))
		what := "fsync-write " + p
		m.both(what, func(root string) error {
			f, err := os.OpenFile(filepath.Join(root, p), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt(data, 7); err != nil {
				return err
			}
			return f.Sync()
		})
		return what
	case k == 13:
		target := m.randPath(1)
		what := fmt.Sprintf("symlink %s -> %s", p, target)
		m.both(what, func(root string) error { return syscall.Symlink(target, filepath.Join(root, p)) })
		return what
	default: // reopen and read: contents must match
		what := "read " + p
		var got [2][]byte
		var errs [2]error
		for i, root := range m.roots {
			got[i], errs[i] = os.ReadFile(filepath.Join(root, p))
		}
		if errnoOf(errs[0]) != errnoOf(errs[1]) || !bytes.Equal(got[0], got[1]) {
			m.t.Errorf("%s: local %d bytes (%v), braid %d bytes (%v)", what, len(got[0]), errs[0], len(got[1]), errs[1])
		}
		return what
	}
}

// entry is what the tree comparison looks at for one path.
type entry struct {
	mode  fs.FileMode
	size  int64
	nlink uint64
	data  string
	xattr string
}

func (m *model) snapshot(root string) map[string]entry {
	out := map[string]entry{}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		e := entry{mode: fs.FileMode(st.Mode & 0o7777)}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			e.mode, e.data = fs.ModeSymlink, "-> "+target // symlink modes are 0777 by definition
			out[rel] = e
			return nil
		case d.IsDir():
			e.mode |= fs.ModeDir
		default:
			e.size, e.nlink = st.Size, uint64(st.Nlink)
			b, _ := os.ReadFile(p)
			e.data = string(b)
		}
		if m.xattrs {
			buf := make([]byte, 64)
			if n, err := unix.Getxattr(p, "user.k", buf); err == nil {
				e.xattr = string(buf[:n])
			}
		}
		out[rel] = e
		return nil
	})
	return out
}

func (m *model) compareTrees(step int, what string) {
	a, b := m.snapshot(m.roots[0]), m.snapshot(m.roots[1])
	var names []string
	for k := range a {
		names = append(names, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		ea, oka := a[n]
		eb, okb := b[n]
		switch {
		case oka != okb:
			m.t.Errorf("after step %d (%s): %s exists on local disk %v, on braid %v", step, what, n, oka, okb)
		case ea.mode != eb.mode || ea.size != eb.size || ea.nlink != eb.nlink || ea.xattr != eb.xattr:
			m.t.Errorf("after step %d (%s): %s differs: local %v/%d/%d/%q, braid %v/%d/%d/%q",
				step, what, n, ea.mode, ea.size, ea.nlink, ea.xattr, eb.mode, eb.size, eb.nlink, eb.xattr)
		case ea.data != eb.data:
			m.t.Errorf("after step %d (%s): %s contents differ", step, what, n)
		}
	}
}
