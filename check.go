package braid

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"

	"github.com/braidfs/braid/internal/wire"
)

// CheckReport is what Check found.
type CheckReport struct {
	Files      int64
	Skipped    int64 // symlinks and other entries that hold no data
	Stripes    int64
	Unverified int64    // stripes with exactly K units readable: they decode, but nothing is left to compare
	Problems   []string // stripes whose units disagree or that cannot be decoded
}

// maxCheckProblems bounds the problems one report lists.
const maxCheckProblems = 1000

// Check walks every file at or below p and reads every unit of every
// stripe, verifying that each decodes and that data and redundancy agree.
// Units of components marked dirty, or on unreachable OSDs, are left out;
// the rest are still compared when more than K remain. It changes nothing
// (scrub repairs); it is the consistency checker for tests and operators.
func (c *Client) Check(ctx context.Context, p string) (CheckReport, error) {
	return c.CheckTree(ctx, p, CheckOptions{})
}

// CheckOptions tune CheckTree.
type CheckOptions struct {
	// Progress, if set, is called with the report so far after each file.
	Progress func(CheckReport)
}

// CheckTree is Check with options.
func (c *Client) CheckTree(ctx context.Context, p string, o CheckOptions) (CheckReport, error) {
	var rep CheckReport
	fi, err := c.Stat(ctx, p)
	if err != nil {
		return rep, err
	}
	if !fi.IsDir {
		if !fi.Mode.IsRegular() {
			rep.Skipped++
			return rep, nil
		}
		return rep, c.checkFile(ctx, p, &rep)
	}
	dirs := []string{p}
	for len(dirs) > 0 {
		d := dirs[0]
		dirs = dirs[1:]
		entries, err := c.ReadDir(ctx, d)
		if err != nil {
			return rep, err
		}
		for _, e := range entries {
			full := path.Join(d, e.Name)
			switch {
			case e.IsDir:
				dirs = append(dirs, full)
				continue
			case !e.Mode.IsRegular():
				rep.Skipped++
				continue
			}
			if err := c.checkFile(ctx, full, &rep); err != nil {
				return rep, err
			}
			if o.Progress != nil {
				o.Progress(rep)
			}
		}
	}
	return rep, nil
}

func (rep *CheckReport) problem(format string, args ...any) {
	if len(rep.Problems) < maxCheckProblems {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
	}
}

func (c *Client) checkFile(ctx context.Context, p string, rep *CheckReport) error {
	f, err := c.Open(ctx, p)
	if errors.Is(err, wire.ErrNotFound) {
		return nil // removed while walking
	}
	if err != nil {
		return err
	}
	defer f.Close()
	rep.Files++
	size := f.storedSize()
	lay := f.layout()
	spec := lay.Spec
	S, U := spec.StripeBytes(), spec.UnitBytes
	for fs := int64(0); fs*S < size; fs++ {
		n := int(min(U, size-fs*S))
		shards, missing, lost := f.readStripeUnits(ctx, fs, n)
		rep.Stripes++
		for _, err := range lost {
			rep.problem("%s: stripe %d: %v", p, fs, err)
		}
		if msg := f.verifyStripe(shards, missing); msg != "" {
			rep.problem("%s: stripe %d: %s", p, fs, msg)
		} else if len(shards)-len(missing) == spec.K && len(missing) > 0 {
			rep.Unverified++
		}
		putShards(shards)
	}
	return nil
}

// readStripeUnits reads the first n bytes of every unit of file stripe fs;
// units that are dirty or unreadable come back nil and listed in missing,
// and those that are corrupt or lost (not merely unreachable) in lost.
func (f *File) readStripeUnits(ctx context.Context, fs int64, n int) (shards [][]byte, missing []int, lost []error) {
	lay := f.layout()
	w := lay.Spec.Width()
	shards = make([][]byte, w)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for u := 0; u < w; u++ {
		loc := lay.UnitOf(fs, u)
		if f.isDirty(loc.Component) {
			missing = append(missing, u)
			continue
		}
		buf := wire.GetBuf(n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.readUnit(ctx, loc.Component, loc.ObjectOff, buf, false); err != nil {
				wire.PutBuf(buf)
				mu.Lock()
				missing = append(missing, u)
				if errors.Is(err, wire.ErrCorrupt) || errors.Is(err, wire.ErrLost) {
					lost = append(lost, err)
				}
				mu.Unlock()
				return
			}
			shards[u] = buf
		}()
	}
	wg.Wait()
	slices.Sort(missing)
	return shards, missing, lost
}

// verifyStripe returns what is wrong with a stripe, or "" if its units
// agree: all present and parity verifies; or, with some missing but more
// than K present, decoding from K of them reproduces the others.
func (f *File) verifyStripe(shards [][]byte, missing []int) string {
	spec := f.layout().Spec
	present := len(shards) - len(missing)
	if present < spec.K {
		return fmt.Sprintf("only %d of %d units readable (missing units %v)", present, len(shards), missing)
	}
	if len(missing) == 0 {
		ok, err := f.enc.Verify(shards)
		if err != nil {
			return err.Error()
		}
		if !ok {
			return "parity disagrees with data"
		}
		return ""
	}
	if present == spec.K {
		return ""
	}
	trial := make([][]byte, len(shards))
	kept := 0
	for u, b := range shards {
		if b != nil && kept < spec.K {
			trial[u] = bytes.Clone(b)
			kept++
		}
	}
	if err := f.enc.Reconstruct(trial); err != nil {
		return "decode failed: " + err.Error()
	}
	for u, b := range shards {
		if b != nil && !bytes.Equal(trial[u], b) {
			return fmt.Sprintf("unit %d disagrees with the others (missing units %v)", u, missing)
		}
	}
	return ""
}
