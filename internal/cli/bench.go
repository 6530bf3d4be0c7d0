package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/bench"
	"github.com/braidfs/braid/internal/layout"
)

func (e *env) benchCmd() *cobra.Command {
	var size, layouts, diskDir, workers string
	var meta bool
	var files, dirs int
	var fill string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure one client's sequential write and read throughput against a running cluster",
		Long: "bench writes and reads back one file per layout and prints GB/s next to raw loopback TCP and\n" +
			"raw disk write throughput measured in the same run, as ratios. Writes are timed through close,\n" +
			"which returns only when every OSD has the data on disk.\n\n" +
			"With --meta it measures metadata instead, through the client library: create (and close), stat,\n" +
			"readdir and remove of --files empty files in one directory, by each count of --workers clients\n" +
			"(bench/meta.sh runs the same through the mount, next to a loopback FUSE file system).\n\n" +
			"With --fill DIR it creates --files empty files in DIR (made if missing) by the largest count of\n" +
			"--workers clients and keeps them, for listing benchmarks (bench/bigdir.sh).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fill != "" {
				return e.benchFill(fill, files, workers)
			}
			if meta {
				return e.benchMeta(files, dirs, workers)
			}
			n, err := layout.ParseSize(size)
			if err != nil || n < 1<<20 {
				return fmt.Errorf("--size %q: want at least 1MiB", size)
			}
			n = n &^ (1<<20 - 1)
			if diskDir == "" {
				if st, err := readState(); err == nil {
					diskDir = st.Dir
				} else {
					diskDir = os.TempDir()
				}
			}
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				return e.bench(ctx, c, n, strings.Split(layouts, ";"), diskDir)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&size, "size", "1GiB", "bytes per file")
	f.StringVar(&layouts, "layouts", "stripe:6;mirror:3;ec:4+2", "layouts to measure, separated by ;")
	f.StringVar(&diskDir, "disk-dir", "", "directory for the raw disk measurement (default: the cluster's directory)")
	f.BoolVar(&meta, "meta", false, "measure metadata operations instead of throughput")
	f.IntVar(&files, "files", 100_000, "with --meta: files in the directory")
	f.IntVar(&dirs, "dirs", 1, "with --meta: spread the files over this many directories (a tree, which several active MDS processes share)")
	f.StringVar(&workers, "workers", "1,4", "with --meta: counts of concurrent clients, separated by ,")
	f.StringVar(&fill, "fill", "", "create --files empty files in this directory and keep them")
	return cmd
}

// maxBenchDirs bounds --dirs.
const maxBenchDirs = 4096

// benchCounts parses --workers and checks --files.
func benchCounts(files int, workers string) ([]int, error) {
	var counts []int
	for _, w := range strings.Split(workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("--workers %q: want counts from 1 to 64", workers)
		}
		counts = append(counts, n)
	}
	if files < 1 || files > 10_000_000 {
		return nil, fmt.Errorf("--files %d: want 1 to 10,000,000", files)
	}
	return counts, nil
}

func (e *env) benchFill(dir string, files int, workers string) error {
	counts, err := benchCounts(files, workers)
	if err != nil {
		return err
	}
	return e.withClient(func(ctx context.Context, c *braid.Client) error {
		if err := c.Mkdir(ctx, dir, true); err != nil && !errors.Is(err, braid.ErrExists) {
			return err
		}
		st, err := c.Stat(ctx, dir)
		if err != nil {
			return err
		}
		clients := []*braid.Client{c}
		for len(clients) < slices.Max(counts) {
			extra, err := e.client(ctx)
			if err != nil {
				return err
			}
			defer extra.Close()
			clients = append(clients, extra)
		}
		rate, err := bench.Fill(ctx, clients, st.Ino, files)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "created %d files in %s by %d clients: %.0f/s\n", files, dir, len(clients), rate)
		return nil
	})
}

func (e *env) benchMeta(files, dirs int, workers string) error {
	counts, err := benchCounts(files, workers)
	if err != nil {
		return err
	}
	if dirs < 1 || dirs > maxBenchDirs {
		return fmt.Errorf("--dirs %d: want 1 to %d", dirs, maxBenchDirs)
	}
	return e.withClient(func(ctx context.Context, c *braid.Client) error {
		var results []bench.MetaResult
		for _, n := range counts {
			clients := []*braid.Client{c}
			for len(clients) < n {
				extra, err := e.client(ctx)
				if err != nil {
					return err
				}
				defer extra.Close()
				clients = append(clients, extra)
			}
			r, err := bench.Meta(ctx, clients, fmt.Sprintf(".bench-meta-%d", n), files, dirs, mdsProbe(c))
			if err != nil {
				return fmt.Errorf("%d workers: %w", n, err)
			}
			results = append(results, r)
		}
		where := "one directory"
		if dirs > 1 {
			where = fmt.Sprintf("%d directories", dirs)
		}
		fmt.Fprintf(e.stdout, "metadata through the client library, %s, empty files\n", where)
		bench.ReportMeta(e.stdout, results)
		return nil
	})
}

// mdsProbe reads the metadata service's totals: its engine requests
// (status) and the CPU time of the MDS processes on this machine
// (/proc), embedded etcd members included.
func mdsProbe(c *braid.Client) bench.Probe {
	host, _ := os.Hostname()
	return func(ctx context.Context) (bench.Cost, error) {
		st, err := c.Status(ctx)
		if err != nil {
			return bench.Cost{}, err
		}
		r := st.Meta.Requests
		out := bench.Cost{Reads: float64(r.Reads), Commits: float64(r.Commits), Conflicts: float64(r.Conflicts)}
		for _, p := range st.Meta.MDS {
			if p.Host == host && p.Pid > 0 {
				out.CPU += processCPU(p.Pid)
			}
		}
		return out, nil
	}
}

// processCPU is the user and system CPU time pid has used (0 if unknown).
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces), from the
	// third: utime and stime are the 14th and 15th, in clock ticks.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+stime) * time.Second / clockTicks
}

// clockTicks is Linux's USER_HZ, the unit of /proc's CPU times.
const clockTicks = 100

func (e *env) bench(ctx context.Context, c *braid.Client, n int64, specs []string, diskDir string) error {
	tcp, err := bench.LoopbackTCP(n)
	if err != nil {
		return fmt.Errorf("loopback baseline: %w", err)
	}
	disk, err := bench.DiskWrite(diskDir, n)
	if err != nil {
		return fmt.Errorf("disk baseline: %w", err)
	}
	results := []bench.Result{tcp, disk}
	if err := c.Mkdir(ctx, "/.bench", true); err != nil {
		return err
	}
	for _, spec := range specs {
		path := "/.bench/" + strings.NewReplacer(":", "-", ",", "-", "+", "p", "=", "-").Replace(spec)
		w, err := bench.Write(ctx, c, path, spec, n)
		if err != nil {
			return fmt.Errorf("%s: %w", spec, err)
		}
		r, err := bench.Read(ctx, c, path, spec)
		if err != nil {
			return fmt.Errorf("%s: %w", spec, err)
		}
		results = append(results, w, r)
		_ = c.Remove(ctx, path)
	}
	fmt.Fprintf(e.stdout, "one client, %s per file, 1 MiB writes\n", layout.FormatSize(n))
	bench.Report(e.stdout, tcp, disk, results)
	return nil
}
