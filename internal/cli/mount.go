package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/fusefs"
	"github.com/braidfs/braid/internal/mdsproto"
)

func (e *env) mountCmd() *cobra.Command {
	o := fusefs.DefaultOptions
	var addrFile, cpuProfile, syncPolicy string
	cmd := &cobra.Command{
		Use:   "mount PATH",
		Short: "mount the cluster's namespace at PATH (FUSE); unmounts on Ctrl-C or SIGTERM",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if !mdsproto.ValidSyncPolicy(syncPolicy) {
				return fmt.Errorf("--sync %q: want %s or %s", syncPolicy, mdsproto.SyncCluster, mdsproto.SyncAsync)
			}
			c, err := e.clientWith(ctx, func(o *braid.Options) { o.Sync = syncPolicy })
			if err != nil {
				return err
			}
			defer c.Close()
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(pf); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			mdsAddr, _ := e.resolveMDS()
			o.Name = "braid:" + mdsAddr
			srv, err := fusefs.Mount(c, args[0], o)
			if err != nil {
				return fmt.Errorf("mount %s: %w", args[0], err)
			}
			fmt.Fprintf(e.stdout, "braid mounted at %s (MDS %s); Ctrl-C unmounts\n", args[0], mdsAddr)
			if err := announce(addrFile, args[0]); err != nil {
				_ = srv.Unmount()
				return err
			}
			done := make(chan struct{})
			go func() { srv.Wait(); close(done) }()
			select {
			case <-ctx.Done():
				if err := srv.Unmount(); err != nil {
					return fmt.Errorf("unmount %s: %w", args[0], err)
				}
				<-done
			case <-done: // unmounted from outside (umount)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.CacheMetadata, "cache", o.CacheMetadata, "cache names and attributes as long as the MDS keeps them coherent (--cache=false: fixed timeouts)")
	f.BoolVar(&o.WriteBackNames, "write-back", o.WriteBackNames, "with --cache, answer creates of empty files and unlinks in directories this mount made before the MDS has them, durable at fsync of the directory (--write-back=false: each is durable when it returns)")
	f.StringVar(&syncPolicy, "sync", mdsproto.SyncCluster, "write-sync policy of files with none of their own (xattr braid.sync): cluster (close returns once every OSD has the data durable) or async (once the OSDs have it; durable within a second, or at fsync)")
	f.DurationVar(&o.AttrTimeout, "attr-timeout", o.AttrTimeout, "with --cache=false, how long the kernel may cache attributes")
	f.DurationVar(&o.EntryTimeout, "entry-timeout", o.EntryTimeout, "with --cache=false, how long the kernel may cache names")
	f.BoolVar(&o.Debug, "debug", false, "log every FUSE request")
	f.StringVar(&addrFile, "addr-file", "", "write the mount point to this file once mounted")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the mount to this file (for tuning)")
	return cmd
}
