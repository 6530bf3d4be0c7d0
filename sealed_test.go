package braid_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/seal"
	"github.com/braidfs/braid/internal/testcluster"
	"github.com/braidfs/braid/internal/wire"
)

var sealedSpecs = []string{"ec:4+2,unit=16KiB,enc=aes-gcm", "mirror:2,enc=aes-gcm", "stripe:3,unit=8KiB,enc=aes-gcm"}

// TestSealedFilesAgainstModel: random writes, reads, truncations and
// punched holes on encrypted files agree with a byte slice, through the
// handle, after reopening, and in the size the MDS reports.
func TestSealedFilesAgainstModel(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	for i, spec := range sealedSpecs {
		seed := uint64(100 + i)
		t.Run(spec, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			p := fmt.Sprintf("/sealed%d", i)
			f, err := cl.Create(ctx, p, braid.CreateOptions{Layout: spec})
			if err != nil {
				t.Fatal(err)
			}
			var model []byte
			for op := 0; op < 300; op++ {
				what := fmt.Sprintf("seed %d op %d", seed, op)
				switch k := rng.IntN(10); {
				case k < 5:
					off, n := rng.IntN(len(model)+20_000), 1+rng.IntN(30_000)
					if rng.IntN(3) == 0 {
						n = 1 + rng.IntN(100)
					}
					data := randBytes(rng, n)
					if _, err := f.WriteAt(data, int64(off)); err != nil {
						t.Fatalf("%s: write %d at %d: %v", what, n, off, err)
					}
					if off+n > len(model) {
						model = append(model, make([]byte, off+n-len(model))...)
					}
					copy(model[off:], data)
				case k < 8:
					off, n := rng.IntN(len(model)+100), rng.IntN(40_000)
					got := make([]byte, n)
					m, err := f.ReadAt(got, int64(off))
					want := model[min(off, len(model)):min(off+n, len(model))]
					if m != len(want) || !bytes.Equal(got[:m], want) || (m < n) != errors.Is(err, io.EOF) || err != nil && !errors.Is(err, io.EOF) {
						t.Fatalf("%s: read %d at %d (size %d): %d bytes, equal %v, %v", what, n, off, len(model), m, bytes.Equal(got[:m], want), err)
					}
				case k < 9:
					n := rng.IntN(len(model)*3/2 + 5000)
					if err := f.Truncate(int64(n)); err != nil {
						t.Fatalf("%s: truncate to %d: %v", what, n, err)
					}
					if n > len(model) {
						model = append(model, make([]byte, n-len(model))...)
					}
					model = model[:n]
				default:
					if len(model) == 0 {
						continue
					}
					off, n := rng.IntN(len(model)), 1+rng.IntN(3*seal.BlockBytes+100)
					if err := f.PunchHole(int64(off), int64(n)); err != nil {
						t.Fatalf("%s: punch %d at %d: %v", what, n, off, err)
					}
					clear(model[off:min(off+n, len(model))])
				}
				if f.Size() != int64(len(model)) {
					t.Fatalf("%s: size %d, want %d", what, f.Size(), len(model))
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			fi, err := cl.Stat(ctx, p)
			if err != nil || fi.Size != int64(len(model)) || !strings.Contains(fi.Layout.Spec, "enc=aes-gcm") {
				t.Fatalf("stat: size %d (want %d), spec %q, %v", fi.Size, len(model), fi.Layout.Spec, err)
			}
			mustRead(t, cl, p, "reopened", model)
		})
	}
	// Whole files written in one go (ReadFrom seals on the way).
	rng := rand.New(rand.NewPCG(7, 7))
	for _, size := range []int{0, 1, seal.BlockBytes - 1, seal.BlockBytes, seal.BlockBytes + 1, 3<<20 + 17} {
		data := randBytes(rng, size)
		p := fmt.Sprintf("/whole-%d", size)
		put(t, cl, p, sealedSpecs[0], data)
		mustRead(t, cl, p, p, data)
		if fi, err := cl.Stat(ctx, p); err != nil || fi.Size != int64(size) {
			t.Fatalf("%s: stat size %d, %v", p, fi.Size, err)
		}
	}
}

// TestSealedDataIsCiphertextOnDisk: the OSDs' files hold no byte of a
// sealed file's plaintext, while a plain file's is there to find.
func TestSealedDataIsCiphertextOnDisk(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl := c.Dial()
	marker := []byte("PLAINTEXT-MARKER-0123456789")
	data := bytes.Repeat(marker, 100_000)
	put(t, cl, "/plain", "ec:4+2", data)
	if !osdFilesHold(t, c, marker) {
		t.Fatal("the marker is not on the OSDs' disks even for a plain file: the scan finds nothing")
	}
	c2 := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cl2 := c2.Dial()
	put(t, cl2, "/sealed", "ec:4+2,enc=aes-gcm", data)
	put(t, cl2, "/sealed-small", "ec:4+2,enc=aes-gcm", marker) // mirrored as a small file, still sealed
	if osdFilesHold(t, c2, marker) {
		t.Fatal("an OSD's disk holds a sealed file's plaintext")
	}
	mustRead(t, cl2, "/sealed", "sealed", data)
	mustRead(t, cl2, "/sealed-small", "sealed small file", marker)
}

func osdFilesHold(t *testing.T, c *testcluster.Cluster, b []byte) bool {
	t.Helper()
	found := false
	for i := range c.OSDs {
		_ = filepath.Walk(c.OSDDir(i), func(p string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() || found {
				return nil
			}
			data, err := os.ReadFile(p)
			if err == nil && bytes.Contains(data, b) {
				found = true
			}
			return nil
		})
	}
	return found
}

// TestSealedBlocksAreAuthenticated: ciphertext changed or moved on an OSD
// (with checksums an OSD keeps, so only the cipher can tell) is an error,
// never data.
func TestSealedBlocksAreAuthenticated(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 4})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(3, 3)), 3*seal.BlockBytes)
	put(t, cl, "/f", "stripe:1,unit=64KiB,enc=aes-gcm", data)
	fi, err := cl.Stat(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	comp := fi.Layout.Components[0]
	raw := func(off int64, p []byte) {
		t.Helper()
		if err := testcluster.RawWrite(c, fi.Ino, 0, comp.OSD, fi.Layout.Version, off, p); err != nil {
			t.Fatal(err)
		}
	}
	readErr := func() error {
		t.Helper()
		got, err := get(t, cl, "/f")
		if err == nil && bytes.Equal(got, data) {
			return nil
		}
		if err == nil {
			t.Fatalf("a changed block read as data (%d bytes)", len(got))
		}
		return err
	}
	// Block 1's ciphertext in block 0's place.
	f, err := cl.Open(ctx, "/f")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	stored := readStored(t, c, fi, seal.StoredBlockBytes, seal.StoredBlockBytes)
	orig := readStored(t, c, fi, 0, seal.StoredBlockBytes)
	raw(0, stored)
	if err := readErr(); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("a block moved to another place: %v, want ErrCorrupt", err)
	}
	raw(0, orig)
	if err := readErr(); err != nil {
		t.Fatalf("the block put back: %v", err)
	}
	flipped := bytes.Clone(orig)
	flipped[100] ^= 0x20
	raw(0, flipped)
	if err := readErr(); !errors.Is(err, wire.ErrCorrupt) {
		t.Fatalf("a flipped bit: %v, want ErrCorrupt", err)
	}
}

// readStored reads n stored bytes at off of a one-component file straight
// from its OSD's disk.
func readStored(t *testing.T, c *testcluster.Cluster, fi braid.FileInfo, off, n int64) []byte {
	t.Helper()
	for i, s := range c.OSDs {
		if s != nil && s.ID() == fi.Layout.Components[0].OSD {
			var found []byte
			_ = filepath.Walk(c.OSDDir(i), func(p string, info os.FileInfo, err error) error {
				if err == nil && strings.HasSuffix(p, ".dat") && info.Size() >= off+n && found == nil {
					b, _ := os.ReadFile(p)
					found = bytes.Clone(b[off : off+n])
				}
				return nil
			})
			if found != nil {
				return found
			}
		}
	}
	t.Fatal("the component's object file is not on its OSD")
	return nil
}

// TestSealedFilesHealAndRecoverWithoutKeys: the cluster's servers get no
// key, and rebuild, check and recover sealed files all the same.
func TestSealedFilesHealAndRecoverWithoutKeys(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 7, Auth: true, OSDOutAfter: 3 * time.Second})
	cl := c.Dial()
	data := randBytes(rand.New(rand.NewPCG(5, 5)), 3<<20+17)
	if err := cl.Mkdir(ctx, "/dir", false); err != nil {
		t.Fatal(err)
	}
	put(t, cl, "/dir/sealed", "ec:4+2,unit=64KiB,enc=aes-gcm", data)

	worker := c.DialWith(func(o *braid.Options) {
		o.Credential = c.Issue(auth.Principal{Role: auth.RoleHealer, Name: "healer-test", AnyID: true})
	})
	f, err := worker.Open(ctx, "/dir/sealed")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 10), 0); !errors.Is(err, braid.ErrDenied) {
		t.Fatalf("a repair worker reads a sealed file: %v, want ErrDenied (no key)", err)
	}
	f.Close()

	fi, err := cl.Stat(ctx, "/dir/sealed")
	if err != nil {
		t.Fatal(err)
	}
	vi := osdIndex(c, fi.Layout.Components[0].OSD)
	c.StopOSD(vi)
	mustRead(t, cl, "/dir/sealed", "one OSD down", data)
	testcluster.Eventually(t, 10*time.Second, func() bool {
		st, err := cl.Status(ctx)
		return err == nil && st.Health == mdsproto.HealthDegraded
	}, func() string { return "health never degraded after an OSD stopped" })
	waitHealthy(t, cl, 60*time.Second)
	if n := componentsOn(t, cl, map[string][]byte{"/dir/sealed": data}, fi.Layout.Components[0].OSD); n != 0 {
		t.Fatalf("%d components still on the out OSD", n)
	}
	mustRead(t, cl, "/dir/sealed", "rebuilt", data)
	checkConsistent(t, cl, "rebuilt")

	waitLabelled(t, cl)
	// A hostile OSD rewrites its labels of the file: a newer label
	// without the MDS's MAC, opening the file to everyone at another
	// path, and one whose MAC is made up.
	fi, err = cl.Stat(ctx, "/dir/sealed")
	if err != nil {
		t.Fatal(err)
	}
	forged := mdsproto.ObjectLabel{Ino: fi.Ino, Path: "/stolen", Spec: fi.Layout.Spec, Groups: 1, Version: fi.Layout.Version,
		Size: seal.StoredSize(int64(len(data)), 64<<10), Mode: 0o666, LabeledNs: time.Now().Add(time.Hour).UnixNano()}
	forgeries := [][]byte{mustMarshal(t, forged), mustMarshal(t, mdsproto.SealedLabel{Label: mustMarshal(t, forged), MAC: make([]byte, 28)})}
	for comp, l := range forgeries {
		s := c.OSDs[osdIndex(c, fi.Layout.Components[comp].OSD)]
		if err := s.Store().SetLabel(osd.ObjKey{Ino: fi.Ino, Comp: uint32(comp)}, fi.Layout.Version, l); err != nil {
			t.Fatal(err)
		}
	}
	c.WipeMDS()
	testcluster.Eventually(t, 20*time.Second, func() bool {
		st, err := cl.Status(ctx)
		return err == nil && st.UpOSDs() == 6
	}, func() string { return "OSDs did not re-register with the empty MDS" })
	res, err := cl.RecoverMetadata(ctx, false)
	if err != nil || res.Files != 1 || len(res.Problems) != 0 {
		t.Fatalf("recover-metadata: %+v %v", res, err)
	}
	mustRead(t, cl, "/dir/sealed", "recovered", data)
	if back, err := cl.Stat(ctx, "/dir/sealed"); err != nil || back.Mode.Perm() != 0o644 {
		t.Fatalf("the recovered file: %+v %v (want its own mode, not the forged label's)", back, err)
	}
	if _, err := cl.Stat(ctx, "/stolen"); !errors.Is(err, braid.ErrNotFound) {
		t.Fatalf("a forged label's path: %v", err)
	}
}

// waitLabelled polls until the MDS has written every label it owes.
func waitLabelled(t *testing.T, cl *braid.Client) {
	t.Helper()
	var st braid.Status
	testcluster.Eventually(t, 20*time.Second, func() bool {
		var err error
		st, err = cl.Status(ctx)
		return err == nil && st.LabelsPending == 0
	}, func() string { return fmt.Sprintf("%d labels pending", st.LabelsPending) })
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := mdsproto.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSealedFileTwoWriters: two clients' handles, each opened before the
// other wrote, take turns writing, cutting and punching one sealed file;
// each write's read-modify-write of a block sees what the other left (a
// handle with a stale size once padded nothing and left a short block
// in the middle of the file, which never opened again). Plain layouts
// run the same as a control. (A handle's own size is its view: what the
// file holds is compared once both are closed.)
func TestSealedFileTwoWriters(t *testing.T) {
	c := testcluster.Start(t, testcluster.Options{OSDs: 6})
	cls := []*braid.Client{c.Dial(), c.Dial()}
	for i, spec := range []string{"ec:4+2,unit=16KiB,enc=aes-gcm", "mirror:2,unit=8KiB,enc=aes-gcm", "ec:4+2,unit=16KiB", "mirror:2,unit=8KiB"} {
		seed := uint64(200 + i)
		t.Run(spec, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			p := fmt.Sprintf("/two%d", i)
			a, err := cls[0].Create(ctx, p, braid.CreateOptions{Layout: spec})
			if err != nil {
				t.Fatal(err)
			}
			b, err := cls[1].OpenFile(ctx, p, true)
			if err != nil {
				t.Fatal(err)
			}
			hs := []*braid.File{a, b}
			var model []byte
			// The reviewer's case first: a short block, then the other
			// handle writes past it.
			if _, err := a.WriteAt([]byte("short"), 0); err != nil {
				t.Fatal(err)
			}
			model = append(model, "short"...)
			if _, err := b.WriteAt([]byte("far"), 3*seal.BlockBytes+10); err != nil {
				t.Fatal(err)
			}
			model = append(model, make([]byte, 3*seal.BlockBytes+10-len(model))...)
			model = append(model, "far"...)
			for op := 0; op < 150; op++ {
				h := hs[rng.IntN(2)]
				what := fmt.Sprintf("seed %d op %d", seed, op)
				switch k := rng.IntN(10); {
				case k < 6:
					off, n := rng.IntN(len(model)+3*seal.BlockBytes), 1+rng.IntN(2*seal.BlockBytes)
					data := randBytes(rng, n)
					if _, err := h.WriteAt(data, int64(off)); err != nil {
						t.Fatalf("%s: write %d at %d: %v", what, n, off, err)
					}
					if off+n > len(model) {
						model = append(model, make([]byte, off+n-len(model))...)
					}
					copy(model[off:], data)
				case k < 8:
					n := rng.IntN(len(model) + seal.BlockBytes)
					if err := h.Truncate(int64(n)); err != nil {
						t.Fatalf("%s: truncate to %d: %v", what, n, err)
					}
					if n > len(model) {
						model = append(model, make([]byte, n-len(model))...)
					}
					model = model[:n]
				case len(model) > 0:
					off, n := rng.IntN(len(model)), 1+rng.IntN(2*seal.BlockBytes)
					if err := h.PunchHole(int64(off), int64(n)); err != nil {
						t.Fatalf("%s: punch %d at %d: %v", what, n, off, err)
					}
					clear(model[off:min(off+n, len(model))])
				}
			}
			for _, h := range hs {
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
			}
			mustRead(t, cls[0], p, "after both closed", model)
		})
	}
}
