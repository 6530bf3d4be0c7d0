// Package checker is braid's consistency checker: it reads every unit of
// every stripe that holds data and verifies that data and redundancy
// agree, changing nothing (scrub, in internal/repairworker, repairs).
package checker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/braidfs/braid/internal/client"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Report is what a check found.
type Report struct {
	Files      int64
	Skipped    int64 // symlinks and other entries that hold no data
	Stripes    int64 // stripes read and verified
	Holes      int64 // stripes not read: no unit of theirs holds data (a sparse file's holes)
	BytesRead  int64 // unit bytes read from the OSDs
	Unverified int64 // stripes with exactly K units readable: they decode, but nothing is left to compare
	// Problems lists stripes whose units disagree or that cannot be
	// decoded, and objects shorter than what was written to them,
	// sorted.
	Problems []string
}

// maxCheckProblems bounds the problems one report lists.
const maxCheckProblems = 1000

// Options tune Tree.
type Options struct {
	// Progress, if set, is called with the report so far after each
	// file (from one goroutine at a time).
	Progress func(Report)
	// Files is how many files are checked at once (0: checkFiles), and
	// StripesPerFile how many stripes of each (0: checkStripesPerFile).
	Files          int
	StripesPerFile int
}

// Defaults of Options: enough requests in flight to keep every OSD's
// disk busy, bounded.
const (
	checkFiles          = 8
	checkStripesPerFile = 4
	checkQueuedPaths    = 1024 // paths found and not yet checked
)

// Tree walks every file at or below p and reads every unit of every
// stripe that holds data, verifying that each decodes and that data and
// redundancy agree. Units of components marked dirty, or on unreachable
// OSDs, are left out; the rest are still compared when more than K
// remain. Stripes of a sparse file's holes are not read (data maps say
// which hold data, datamap.go), but every object is checked to be as long
// as what was written to it. It changes nothing (scrub repairs); it is
// the consistency checker for tests and operators.
//
// A walker finds files breadth first while o.Files workers check them.
func Tree(ctx context.Context, c *client.Client, p string, o Options) (Report, error) {
	if o.Files <= 0 {
		o.Files = checkFiles
	}
	if o.StripesPerFile <= 0 {
		o.StripesPerFile = checkStripesPerFile
	}
	var (
		mu  sync.Mutex
		rep Report
	)
	merge := func(r Report) {
		mu.Lock()
		defer mu.Unlock()
		rep.add(r)
		if o.Progress != nil {
			o.Progress(rep.snapshot())
		}
	}
	fi, err := c.Stat(ctx, p)
	if err != nil {
		return rep, err
	}
	if !fi.IsDir {
		var r Report
		if !fi.Mode.IsRegular() {
			r.Skipped++
		} else if err := checkFile(ctx, c, p, o.StripesPerFile, &r); err != nil {
			return rep, err
		}
		merge(r)
		return rep.sorted(), nil
	}
	g, gctx := errgroup.WithContext(ctx)
	paths := make(chan string, checkQueuedPaths)
	g.Go(func() error {
		defer close(paths)
		return walkFiles(gctx, c, p, paths, func() { merge(Report{Skipped: 1}) })
	})
	for range o.Files {
		g.Go(func() error {
			for file := range paths {
				var r Report
				if err := checkFile(gctx, c, file, o.StripesPerFile, &r); err != nil {
					return err
				}
				merge(r)
			}
			return nil
		})
	}
	err = g.Wait()
	return rep.sorted(), err
}

// walkFiles sends the regular files at or below dir to out, breadth
// first; skipped is called for each entry that holds no data.
func walkFiles(ctx context.Context, c *client.Client, dir string, out chan<- string, skipped func()) error {
	dirs := []string{dir}
	for len(dirs) > 0 {
		d := dirs[0]
		dirs = dirs[1:]
		entries, err := c.ReadDir(ctx, d)
		if err != nil {
			return err
		}
		for _, e := range entries {
			full := path.Join(d, e.Name)
			switch {
			case e.IsDir:
				dirs = append(dirs, full)
			case !e.Mode.IsRegular():
				skipped()
			default:
				select {
				case out <- full:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	}
	return nil
}

// add merges r into rep.
func (rep *Report) add(r Report) {
	rep.Files += r.Files
	rep.Skipped += r.Skipped
	rep.Stripes += r.Stripes
	rep.Holes += r.Holes
	rep.BytesRead += r.BytesRead
	rep.Unverified += r.Unverified
	for _, p := range r.Problems {
		if len(rep.Problems) < maxCheckProblems {
			rep.Problems = append(rep.Problems, p)
		}
	}
}

// snapshot is rep with a copy of its problems, for a Progress callback.
func (rep *Report) snapshot() Report {
	r := *rep
	r.Problems = slices.Clone(rep.Problems)
	return r
}

func (rep Report) sorted() Report {
	slices.Sort(rep.Problems)
	return rep
}

func (rep *Report) problem(format string, args ...any) {
	if len(rep.Problems) < maxCheckProblems {
		rep.Problems = append(rep.Problems, fmt.Sprintf(format, args...))
	}
}

// checkFile checks one file into rep, up to stripes stripes at once.
func checkFile(ctx context.Context, c *client.Client, p string, stripes int, rep *Report) error {
	f, err := c.Open(ctx, p)
	if errors.Is(err, wire.ErrNotFound) {
		return nil // removed while walking
	}
	if err != nil {
		return err
	}
	defer f.Close()
	rep.Files++
	size := f.StoredSize()
	lay := f.Layout()
	spec := lay.Spec
	S, U := spec.StripeBytes(), spec.UnitBytes
	maps := f.DataMaps(ctx)
	for comp := range maps.Components() {
		info := maps.Object(comp)
		if info == nil {
			continue
		}
		if err := osdproto.Vouch(*info, 0, f.ExtentOf(comp), f.ExtentOf(comp)); err != nil {
			rep.problem("%s: component %d: %v", p, comp, err)
		}
	}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(stripes)
	for fs := int64(0); fs*S < size; fs++ {
		if maps.Hole(lay, fs) {
			rep.Holes++
			continue
		}
		n := int(min(U, size-fs*S))
		g.Go(func() error {
			shards, missing, lost := f.ReadStripeUnits(gctx, fs, n)
			defer putShards(shards)
			msg := verifyStripe(f.Encoder(), spec, shards, missing)
			mu.Lock()
			defer mu.Unlock()
			rep.Stripes++
			rep.BytesRead += int64(n * (len(shards) - len(missing)))
			for _, err := range lost {
				rep.problem("%s: stripe %d: %v", p, fs, err)
			}
			if msg != "" {
				rep.problem("%s: stripe %d: %s", p, fs, msg)
			} else if len(shards)-len(missing) == spec.K && len(missing) > 0 {
				rep.Unverified++
			}
			return nil
		})
	}
	return g.Wait()
}

// verifyStripe returns what is wrong with a stripe, or "" if its units
// agree: all present and parity verifies; or, with some missing but more
// than K present, decoding from K of them reproduces the others.
func verifyStripe(enc client.Encoder, spec layout.Spec, shards [][]byte, missing []int) string {
	present := len(shards) - len(missing)
	if present < spec.K {
		return fmt.Sprintf("only %d of %d units readable (missing units %v)", present, len(shards), missing)
	}
	if len(missing) == 0 {
		ok, err := enc.Verify(shards)
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
	if err := enc.Reconstruct(trial); err != nil {
		return "decode failed: " + err.Error()
	}
	for u, b := range shards {
		if b != nil && !bytes.Equal(trial[u], b) {
			return fmt.Sprintf("unit %d disagrees with the others (missing units %v)", u, missing)
		}
	}
	return ""
}

// putShards returns a stripe's unit buffers to the pool.
func putShards(shards [][]byte) {
	for _, b := range shards {
		if b != nil {
			wire.PutBuf(b)
		}
	}
}
