package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid/internal/scalesim"
)

// Bounds of a simulation (memory: a sampled file holds its layout).
const (
	maxSimOSDs    = 1_000_000
	maxSimSamples = 10_000_000
)

// simCmd runs the scale simulator: the placement, repair, balancing and
// routing cores over a large simulated cluster (internal/scalesim).
func (e *env) simCmd() *cobra.Command {
	cfg := scalesim.DefaultConfig()
	var layouts, out string
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "simulate a large cluster's placement, rebuilds, growth and data loss with braid's own decision code",
		Long: "sim places a sample of files with the MDS's placement over simulated OSDs in hosts and racks, rebuilds a lost disk, host and rack\n" +
			"as the MDS's repair planning decides, grows the cluster by 10% and balances it, and runs years of disk, host and rack failures\n" +
			"to estimate the chance of losing data, checked against the textbook MTTDL where it applies.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Layouts = strings.Split(layouts, ",")
			if cfg.Racks < 1 || cfg.HostsPerRack < 1 || cfg.OSDsPerHost < 1 || cfg.SampleFiles < 100 || cfg.Files < int64(cfg.SampleFiles) || cfg.Years < 0 {
				return fmt.Errorf("want at least one rack, host and disk, --sample-files of 100 or more and no more than --files, and years >= 0")
			}
			if cfg.Racks > maxSimOSDs || cfg.HostsPerRack > maxSimOSDs || cfg.OSDsPerHost > maxSimOSDs ||
				cfg.Racks*cfg.HostsPerRack*cfg.OSDsPerHost > maxSimOSDs || cfg.SampleFiles > maxSimSamples {
				return fmt.Errorf("at most %d OSDs and %d sampled files", maxSimOSDs, maxSimSamples)
			}
			began := time.Now()
			rep, err := scalesim.Run(cfg, time.Now)
			if err != nil {
				return err
			}
			text := rep.Text() + fmt.Sprintf("\n(simulated in %v)\n", time.Since(began).Round(time.Second))
			fmt.Fprint(e.stdout, text)
			if out == "" {
				return nil
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(out, "report.txt"), []byte(text), 0o644); err != nil {
				return err
			}
			for name, svg := range rep.Plots() {
				if err := os.WriteFile(filepath.Join(out, name), []byte(svg), 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Racks, "racks", cfg.Racks, "racks")
	f.IntVar(&cfg.HostsPerRack, "hosts-per-rack", cfg.HostsPerRack, "hosts in each rack")
	f.IntVar(&cfg.OSDsPerHost, "osds-per-host", cfg.OSDsPerHost, "OSDs (disks) on each host")
	f.Int64Var(&cfg.OSDBytes, "osd-bytes", cfg.OSDBytes, "capacity of each OSD in bytes")
	f.Float64Var(&cfg.OSDBandwidth, "osd-bandwidth", cfg.OSDBandwidth, "bytes a second each OSD gives rebuild")
	f.Float64Var(&cfg.SlowFraction, "slow-fraction", cfg.SlowFraction, "fraction of OSDs that are slow")
	f.Float64Var(&cfg.SlowFactor, "slow-factor", cfg.SlowFactor, "a slow OSD's share of the bandwidth")
	f.Int64Var(&cfg.Files, "files", cfg.Files, "files the cluster holds")
	f.IntVar(&cfg.SampleFiles, "sample-files", cfg.SampleFiles, "files placed for real, each standing for files/sample-files of its size")
	f.StringVar(&layouts, "layouts", strings.Join(cfg.Layouts, ","), "layouts to compare")
	f.Float64Var(&cfg.DiskAFR, "disk-afr", cfg.DiskAFR, "disks lost a year, as a fraction")
	f.Float64Var(&cfg.HostAFR, "host-afr", cfg.HostAFR, "hosts lost a year (with their disks), as a fraction")
	f.Float64Var(&cfg.RackAFR, "rack-afr", cfg.RackAFR, "racks lost a year (all their disks), as a fraction")
	f.IntVar(&cfg.Years, "years", cfg.Years, "years of failures simulated for each layout")
	f.IntVar(&cfg.MDS, "mds", cfg.MDS, "MDS processes (routing: the slots a new one takes)")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed: the same seed gives the same report")
	f.BoolVar(&cfg.NoDomains, "no-domains", false, "place ignoring hosts and racks (to compare)")
	f.StringVar(&out, "out", "", "also write the report and its plots (SVG) to this directory")
	return cmd
}
