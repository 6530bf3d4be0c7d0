package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/bench"
	"github.com/braidfs/braid/internal/layout"
)

func (e *env) benchCmd() *cobra.Command {
	var size, layouts, diskDir string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "measure one client's sequential write and read throughput against a running cluster",
		Long: "bench writes and reads back one file per layout and prints GB/s next to raw loopback TCP and\n" +
			"raw disk write throughput measured in the same run, as ratios. Writes are timed through close,\n" +
			"which returns only when every OSD has the data on disk.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
	return cmd
}

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
