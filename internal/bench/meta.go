package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/braidfs/braid"
)

// MetaResult is one metadata benchmark: operations per second of each
// phase over one directory of Files entries, by Workers clients at once,
// and, where a probe could tell, what each operation cost the MDS.
type MetaResult struct {
	Workers, Files, Dirs          int
	Create, Stat, Readdir, Remove float64 // per second (Readdir: entries)
	// Cost per operation of each phase (create, stat, readdir, remove);
	// zero without a probe.
	Cost [4]Cost
}

// Cost is what the metadata service spent, in total or per operation.
type Cost struct {
	Reads, Commits, Conflicts float64 // engine requests (etcd only)
	CPU                       time.Duration
}

// Probe reads the metadata service's running totals (a Cost).
type Probe func(ctx context.Context) (Cost, error)

func (c Cost) per(before Cost, ops int) Cost {
	n := float64(max(ops, 1))
	return Cost{Reads: (c.Reads - before.Reads) / n, Commits: (c.Commits - before.Commits) / n,
		Conflicts: (c.Conflicts - before.Conflicts) / n, CPU: (c.CPU - before.CPU) / time.Duration(max(ops, 1))}
}

// Meta creates files empty files in a new directory dir through the
// library (create and close, as touch does), stats each, lists the
// directory, and removes every file, each phase split among the clients
// (one worker each), and reports each phase's rate. With dirs above 1
// the files are spread over that many subdirectories of dir (file i in
// the (i mod dirs)-th), made before the clock starts: a tree, as an
// untar makes, which several active MDS processes share by directory.
//
// probe, if not nil, is read before and after each phase, for the cost
// of its operations (each reading includes the probe's own cost).
func Meta(ctx context.Context, clients []*braid.Client, dir string, files, dirs int, probe Probe) (MetaResult, error) {
	res := MetaResult{Workers: len(clients), Files: files, Dirs: max(dirs, 1)}
	if len(clients) == 0 || files < len(clients) {
		return res, fmt.Errorf("need at least one client and a file per client")
	}
	top, err := clients[0].MkdirAt(ctx, braid.RootIno, dir, 0o755, 0, 0)
	if err != nil {
		return res, err
	}
	inos := []uint64{top.Ino} // the directories files go to
	if dirs > 1 {
		inos = inos[:0]
		for j := range dirs {
			sub, err := clients[0].MkdirAt(ctx, top.Ino, fmt.Sprintf("d%04d", j), 0o755, 0, 0)
			if err != nil {
				return res, err
			}
			inos = append(inos, sub.Ino)
		}
	}
	in := func(i int) uint64 { return inos[i%len(inos)] }
	var last Cost
	measured := func(i int) {
		if probe == nil {
			return
		}
		if now, err := probe(ctx); err == nil {
			if i >= 0 {
				res.Cost[i] = now.per(last, files)
			}
			last = now
		}
	}
	measured(-1)
	phase := func(op func(c *braid.Client, i int) error) (float64, error) { return split(clients, files, op) }
	if res.Create, err = phase(func(c *braid.Client, i int) error { return touch(ctx, c, in(i), i) }); err != nil {
		return res, err
	}
	measured(0)
	if res.Stat, err = phase(func(c *braid.Client, i int) error {
		_, err := c.LookupAt(ctx, in(i), name(i))
		return err
	}); err != nil {
		return res, err
	}
	measured(1)
	start, listed := time.Now(), 0
	for _, d := range inos {
		n, err := listAll(ctx, clients[0], d)
		if err != nil {
			return res, err
		}
		listed += n
	}
	if listed != files {
		return res, fmt.Errorf("listed %d of %d entries", listed, files)
	}
	res.Readdir = float64(files) / time.Since(start).Seconds()
	measured(2)
	if res.Remove, err = phase(func(c *braid.Client, i int) error {
		return c.RemoveAt(ctx, in(i), name(i), false)
	}); err != nil {
		return res, err
	}
	measured(3)
	if dirs > 1 {
		for j := range dirs {
			if err := clients[0].RemoveAt(ctx, top.Ino, fmt.Sprintf("d%04d", j), true); err != nil {
				return res, err
			}
		}
	}
	return res, clients[0].RemoveAt(ctx, braid.RootIno, dir, true)
}

// listAll lists directory dir page by page and counts its entries.
func listAll(ctx context.Context, c *braid.Client, dir uint64) (int, error) {
	listed := 0
	for after, more := "", true; more; {
		ents, m, err := c.ReadDirAt(ctx, dir, after, 1000)
		if err != nil {
			return listed, err
		}
		if more = m; len(ents) == 0 {
			break
		}
		listed += len(ents)
		after = ents[len(ents)-1].Name
	}
	return listed, nil
}

// ReportMeta prints metadata results as a table, and their costs per
// operation where they were probed.
func ReportMeta(w io.Writer, results []MetaResult) {
	fmt.Fprintf(w, "%-8s %8s %6s %10s %10s %12s %10s\n", "workers", "files", "dirs", "create/s", "stat/s", "readdir/s", "remove/s")
	probed := false
	for _, r := range results {
		fmt.Fprintf(w, "%-8d %8d %6d %10.0f %10.0f %12.0f %10.0f\n", r.Workers, r.Files, r.Dirs, r.Create, r.Stat, r.Readdir, r.Remove)
		probed = probed || r.Cost != [4]Cost{}
	}
	if !probed {
		return
	}
	fmt.Fprintf(w, "\nper operation at the MDS processes: CPU, and engine reads+commits (conflicts) where the engine is etcd\n")
	fmt.Fprintf(w, "%-8s %-18s %-18s %-18s %-18s\n", "workers", "create", "stat", "readdir (entry)", "remove")
	for _, r := range results {
		fmt.Fprintf(w, "%-8d", r.Workers)
		for _, c := range r.Cost {
			fmt.Fprintf(w, " %-18s", fmt.Sprintf("%4.0fus %.1f+%.1f(%.2f)", float64(c.CPU)/float64(time.Microsecond), c.Reads, c.Commits, c.Conflicts))
		}
		fmt.Fprintln(w)
	}
}

// Fill creates files empty files (f0000000, f0000001, ...) in the
// directory of inode dir through the library, split among the clients,
// and keeps them: the large directories listing benchmarks read. It
// returns the creates per second.
func Fill(ctx context.Context, clients []*braid.Client, dir uint64, files int) (float64, error) {
	if len(clients) == 0 {
		return 0, fmt.Errorf("need at least one client")
	}
	return split(clients, files, func(c *braid.Client, i int) error { return touch(ctx, c, dir, i) })
}

func name(i int) string { return fmt.Sprintf("f%07d", i) }

// touch creates file i in dir empty and closes it, as touch does.
func touch(ctx context.Context, c *braid.Client, dir uint64, i int) error {
	f, err := c.CreateAt(ctx, dir, name(i), braid.CreateOptions{Mode: 0o644, SizeHint: 0, Exclusive: true})
	if err != nil {
		return err
	}
	return f.Close()
}

// split runs op on files 0..files-1, each client (one worker each)
// taking every len(clients)-th, and returns files per second.
func split(clients []*braid.Client, files int, op func(c *braid.Client, i int) error) (float64, error) {
	start := time.Now()
	errs := make(chan error, len(clients))
	var wg sync.WaitGroup
	for w, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < files; i += len(clients) {
				if err := op(c, i); err != nil {
					errs <- fmt.Errorf("%s: %w", name(i), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return float64(files) / time.Since(start).Seconds(), <-errs
}
