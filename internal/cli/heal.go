package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
)

// pollEvery is how often commands that wait on the cluster ask again.
const pollEvery = 500 * time.Millisecond

func (e *env) scrubCmd() *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "scrub [PATH]",
		Short: "verify every block's checksum and every stripe's parity, repairing from redundancy",
		Long: "scrub queues the files at or below PATH (default /) for verification at the MDS's\n" +
			"--scrub-rate and waits until they are done, then prints what it found and repaired.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				before, err := c.Status(ctx)
				if err != nil {
					return err
				}
				n, err := c.Scrub(ctx, p)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "scrubbing %d files under %s\n", n, p)
				if noWait {
					return nil
				}
				// Done when every queued file was taken off the queue (scrubbed,
				// failed, repaired instead or removed) and none is in progress.
				show := e.rateProgress("scrub")
				start := time.Now()
				st, err := waitStatus(ctx, c, func(st braid.Status) bool {
					show(min(n, st.Repair.ScrubTaken-before.Repair.ScrubTaken), st.Repair.ScrubBytes-before.Repair.ScrubBytes)
					return st.Repair.ScrubQueued == 0 && st.Repair.Active == 0 && st.Repair.ScrubTaken-before.Repair.ScrubTaken >= n
				})
				show(-1, 0)
				if err != nil {
					return err
				}
				r, b := st.Repair, before.Repair
				took := time.Since(start)
				fmt.Fprintf(e.stdout, "scrubbed %d files (%d failed, %d repaired or removed instead), %s read in %v (%s/s); %d units were wrong and rewritten from redundancy\n",
					r.ScrubbedFiles-b.ScrubbedFiles, r.ScrubFailed-b.ScrubFailed,
					max(0, (r.ScrubTaken-b.ScrubTaken)-(r.ScrubbedFiles-b.ScrubbedFiles)-(r.ScrubFailed-b.ScrubFailed)),
					human(r.ScrubBytes-b.ScrubBytes), took.Round(time.Millisecond),
					human(int64(float64(r.ScrubBytes-b.ScrubBytes)/max(took.Seconds(), 1e-3))), r.ScrubRepaired-b.ScrubRepaired)
				for _, msg := range st.Repair.RecentErrors {
					fmt.Fprintf(e.stdout, "  recent repair error: %s\n", msg)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "queue the scrub and return")
	return cmd
}

// waitStatus polls the cluster status until done holds or ctx ends (Ctrl-C).
func waitStatus(ctx context.Context, c *braid.Client, done func(braid.Status) bool) (braid.Status, error) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		st, err := c.Status(ctx)
		if err == nil && done(st) {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-t.C:
		}
	}
}

func (e *env) osdDrainCmd() *cobra.Command {
	var undo, noWait bool
	cmd := &cobra.Command{
		Use:   "drain ID",
		Short: "move every component off an OSD so it can be removed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOSDID(args[0])
			if err != nil {
				return err
			}
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				if err := c.DrainOSD(ctx, id, undo); err != nil {
					return err
				}
				if undo {
					fmt.Fprintf(e.stdout, "OSD %d is no longer draining\n", id)
					return nil
				}
				fmt.Fprintf(e.stdout, "draining OSD %d\n", id)
				if noWait {
					return nil
				}
				_, err := waitStatus(ctx, c, func(st braid.Status) bool {
					for _, o := range st.OSDs {
						if o.ID == id {
							fmt.Fprintf(e.stderr, "\r%d components left on OSD %d   ", o.Components, id)
							return o.Components == 0 && st.Repair.Active == 0
						}
					}
					return false
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "\nOSD %d holds nothing: it can be stopped and removed\n", id)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&undo, "undo", false, "stop draining")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "start the drain and return")
	return cmd
}

func (e *env) healCmd() *cobra.Command {
	var workers int
	cmd := &cobra.Command{
		Use:   "heal",
		Short: "run repair workers for the cluster (adds rebuild bandwidth beside the MDS's own)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := e.client(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			host, _ := os.Hostname()
			err = c.Heal(ctx, braid.HealOptions{Workers: workers, Name: fmt.Sprintf("%s:%d", host, os.Getpid())})
			if ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().IntVar(&workers, "workers", 4, "files repaired at once")
	return cmd
}

// printHealth prints the health line, problems and repair progress.
func (e *env) printHealth(st braid.Status) {
	fmt.Fprintf(e.stdout, "health: %s\n", st.Health)
	for _, p := range st.Problems {
		fmt.Fprintf(e.stdout, "  %s\n", p)
	}
	r := st.Repair
	if r.FilesLeft > 0 || r.ActiveRebuild > 0 {
		eta := "unknown"
		if r.ETASeconds > 0 {
			eta = (time.Duration(r.ETASeconds) * time.Second).String()
		}
		fmt.Fprintf(e.stdout, "repair: %d files (%s) left, %d in progress, %s/s, about %s to go\n",
			r.FilesLeft, human(r.BytesLeft), r.ActiveRebuild, human(int64(r.RateBytesPerS)), eta)
	}
	if r.ScrubQueued > 0 || r.ActiveScrub > 0 {
		fmt.Fprintf(e.stdout, "scrub: %d files queued, %d being scrubbed, %s/s (on demand, or the periodic pass every --scrub-every)\n",
			r.ScrubQueued, r.ActiveScrub, human(int64(r.ScrubRateBytesPerS)))
	}
	if r.ActiveBalance > 0 {
		fmt.Fprintf(e.stdout, "balancing: %d components being moved to emptier OSDs\n", r.ActiveBalance)
	}
	if r.FilesDone > 0 || r.ScrubbedFiles > 0 || r.Rebalanced > 0 {
		fmt.Fprintf(e.stdout, "since the MDS started: %d files repaired, %d components moved to even out OSDs (%s), %s written in all; %d files scrubbed, %d bad units rewritten\n",
			r.FilesDone, r.Rebalanced, human(r.BalanceBytes), human(r.BytesDone), r.ScrubbedFiles, r.ScrubRepaired)
	}
	for _, line := range r.RecentRepairs {
		fmt.Fprintf(e.stdout, "  recent: %s\n", line)
	}
	if r.Unrepairable > 0 {
		fmt.Fprintf(e.stdout, "%d files cannot be repaired until more OSDs return\n", r.Unrepairable)
	}
	e.printFiles(st)
}

// printFiles names the files status knows to be lost, and what happened
// to files' data lately.
func (e *env) printFiles(st braid.Status) {
	if len(st.LostFiles) > 0 {
		fmt.Fprintf(e.stdout, "lost: %d files cannot be read (restore them from a backup, or remove them):\n", st.LostCount)
		for _, f := range st.LostFiles {
			since := ""
			if f.SinceNs != 0 {
				since = ", since " + time.Unix(0, f.SinceNs).Format(time.DateTime)
			}
			fmt.Fprintf(e.stdout, "  %s: %s%s\n", fileName(f.Path, f.Ino), f.Why, since)
		}
		if n := st.LostCount - int64(len(st.LostFiles)); n > 0 {
			fmt.Fprintf(e.stdout, "  and %d more (braid status --json lists the first %d)\n", n, len(st.LostFiles))
		}
	}
	if len(st.FileEvents) > 0 {
		fmt.Fprintln(e.stdout, "files lately:")
		for _, ev := range st.FileEvents {
			fmt.Fprintf(e.stdout, "  %s %s %s: %s\n", time.Unix(0, ev.AtNs).Format(time.DateTime), ev.What, fileName(ev.Path, ev.Ino), ev.Why)
		}
	}
}

// fileName is a path, or the inode's number when no name leads to it.
func fileName(path string, ino uint64) string {
	if path == "" {
		return fmt.Sprintf("inode %d (no name)", ino)
	}
	return path
}

func (e *env) osdAddCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "add",
		Short: "add an OSD to the cluster started by braid up (elsewhere: start braid osd against the MDS)",
		Long: "add asks the running braid up to start one more OSD. New files use it at once and the\n" +
			"MDS moves existing components onto it in the background until OSDs hold similar amounts.\n" +
			"For a cluster not started by braid up, run `braid osd --dir DIR --mds-addr MDS` on the new host.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := readState()
			if err != nil {
				return fmt.Errorf("no cluster started by braid up (%w); start `braid osd --mds-addr ADDR` instead", err)
			}
			before := len(st.OSDs)
			if err := syscall.Kill(st.Pid, syscall.SIGUSR1); err != nil {
				return fmt.Errorf("signal braid up (pid %d): %w", st.Pid, err)
			}
			deadline := time.Now().Add(upReadyTimeout)
			for time.Now().Before(deadline) {
				if now, err := readState(); err == nil && len(now.OSDs) > before {
					o := now.OSDs[len(now.OSDs)-1]
					fmt.Fprintf(e.stdout, "added OSD at %s (pid %d, data in %s)\n", o.Addr, o.Pid, o.Dir)
					return nil
				}
				time.Sleep(pollEvery) // polling another process's state file; bounded by the deadline
			}
			return fmt.Errorf("braid up did not start an OSD within %v; see its logs", upReadyTimeout)
		},
	}
}

func (e *env) osdRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID",
		Short: "forget a stopped OSD that holds no components (drain it first)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseOSDID(args[0])
			if err != nil {
				return err
			}
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				if err := c.RemoveOSD(ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "OSD %d removed from the cluster map\n", id)
				return nil
			})
		},
	}
}

func (e *env) checkCmd() *cobra.Command {
	var files int
	cmd := &cobra.Command{
		Use:   "check [PATH]",
		Short: "read every stripe under PATH and verify it decodes and its parity matches (changes nothing)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				show := e.rateProgress("check")
				start := time.Now()
				rep, err := c.CheckTree(ctx, p, braid.CheckOptions{Files: files, Progress: func(r braid.CheckReport) {
					show(r.Files, r.BytesRead)
				}})
				show(-1, 0)
				if err != nil {
					return err
				}
				took := time.Since(start)
				fmt.Fprintf(e.stdout, "checked %d files, %d stripes, %s read in %v (%s/s); %d stripes of holes not read, %d entries without data skipped: %d problems, %d stripes decodable but not verifiable (units missing)\n",
					rep.Files, rep.Stripes, human(rep.BytesRead), took.Round(time.Millisecond), human(int64(float64(rep.BytesRead)/max(took.Seconds(), 1e-3))),
					rep.Holes, rep.Skipped, len(rep.Problems), rep.Unverified)
				for _, pr := range rep.Problems {
					fmt.Fprintf(e.stdout, "  %s\n", pr)
				}
				if len(rep.Problems) > 0 {
					return fmt.Errorf("%d inconsistent or undecodable stripes", len(rep.Problems))
				}
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&files, "files", 8, "files checked at once (each reads up to 4 stripes at once)")
	return cmd
}

func (e *env) recoverCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "recover-metadata",
		Short: "rebuild a lost namespace from the labels every OSD keeps with its objects",
		Long: "recover-metadata is for when the MDS's store is lost: start the MDS on an empty --dir with the\n" +
			"same cluster key, let the OSDs register (they keep their ids), then run this. Every file whose\n" +
			"objects carry a label returns at its path with its layout and size; files whose path is taken\n" +
			"go to /lost+found. Empty directories and directory layouts are not recorded on the OSDs.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				r, err := c.RecoverMetadata(ctx, force)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "scanned %d objects: restored %d files (%d in /lost+found) and %d directories\n",
					r.Objects, r.Files, r.Unnamed, r.Dirs)
				for _, p := range r.Problems {
					fmt.Fprintf(e.stdout, "  %s\n", p)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "merge into a namespace that is not empty")
	return cmd
}

func parseOSDID(s string) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("OSD id %q: want a positive number (see braid status)", s)
	}
	return uint32(id), nil
}
