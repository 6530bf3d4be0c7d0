package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/braidfs/braid/internal/auth"
	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mds"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osd"
	"github.com/braidfs/braid/internal/repairworker"
)

// leadAndServe stands by until this process leads the metadata service
// on eng, serves, and stands by again when deposed (etcd unreachable past
// --meta-lease, or the process paused), its etcd member still running,
// until ctx ends. A failure before it first served is returned (a
// configuration error, most likely); later ones (etcd busy after a
// disruption, the lead lost while starting) are retried, backing off.
// With --all-active it serves at once as one of several active processes
// instead (kv.Etcd.Join), and joins again when its session ends.
func leadAndServe(ctx context.Context, cfg mds.Config, meta *metaFlags, eng *kv.Etcd, addrFile string) error {
	served := false
	backoff := time.Second
	for ctx.Err() == nil {
		var lost <-chan struct{}
		var err error
		if meta.allActive {
			lost, err = meta.join(ctx, &cfg, eng)
		} else {
			lost, err = meta.lead(ctx, &cfg, eng)
		}
		if err == nil {
			served = true
			err = serveMDS(ctx, cfg, meta, addrFile, lost)
			if err == nil && ctx.Err() == nil {
				cfg.Log.Warn("lost the lead of the metadata service to another MDS; standing by again")
				backoff = time.Second
			}
		}
		eng.Resign()
		eng.Leave()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			if !served {
				return err
			}
			cfg.Log.Warn("could not lead the metadata service; standing by again", "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			backoff = min(2*backoff, maxLeadBackoff)
		}
	}
	cfg.Log.Info("mds stopping")
	return nil
}

// maxLeadBackoff bounds the wait between attempts to lead after a failure.
const maxLeadBackoff = 30 * time.Second

// serveMDS runs the MDS until ctx ends or lost is closed (nil: never).
func serveMDS(ctx context.Context, cfg mds.Config, meta *metaFlags, addrFile string, lost <-chan struct{}) error {
	s, err := mds.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg.Log.Info("mds serving", "addr", s.Addr(), "dir", cfg.Dir)
	if err := meta.announce(ctx, s.Addr()); err != nil {
		return fmt.Errorf("record this MDS's address in etcd: %w", err)
	}
	if err := announce(addrFile, s.Addr()); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-lost:
	}
	return nil
}

func (e *env) mdsCmd() *cobra.Command {
	var cfg mds.Config
	var keyFile, addrFile, repairRate, scrubRate, balanceSlack, minFree, credFile string
	var meta metaFlags
	cmd := &cobra.Command{
		Use:   "mds",
		Short: "run the metadata service",
		Long: "mds serves the namespace over mutual TLS. Without --cred it uses DIR/auth/mds.cred, and on its\n" +
			"first start makes the cluster's CA there with that and an administrator's credential (admin.cred).\n\n" +
			"The metadata lives in DIR, or with --meta in an etcd cluster (--meta-peers: one whose members\n" +
			"run inside the MDS processes). Several MDS processes on one etcd cluster are one active and\n" +
			"its standbys: a standby takes over within --meta-lease of the active's death, and an active that\n" +
			"lost the lead (paused, or cut from etcd) stands by again. Standbys need\n" +
			"copies of the active's DIR/auth, cluster.key, filekeys.key and s3secrets.key.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
				return err
			}
			if keyFile == "" {
				var err error
				if keyFile, err = defaultClusterKey(cfg.Dir); err != nil {
					return err
				}
			}
			key, err := capability.LoadKey(keyFile)
			if err != nil {
				return err
			}
			cred, err := mdsCredential(cfg.Dir, credFile)
			if err != nil {
				return err
			}
			cfg.Credential = cred
			cfg.Key, cfg.Log, cfg.RunRepairWorkers = key, e.logger(), repairworker.As(nil, cred)
			if cfg.RepairRateBytes, err = parseRate(repairRate); err != nil {
				return fmt.Errorf("--repair-rate: %w", err)
			}
			if cfg.ScrubRateBytes, err = parseRate(scrubRate); err != nil {
				return fmt.Errorf("--scrub-rate: %w", err)
			}
			if cfg.MinFreeBytes, err = parseRate(minFree); err != nil {
				return fmt.Errorf("--min-free: %w", err)
			}
			if cfg.BalanceSlackBytes, err = parseRate(balanceSlack); err != nil {
				return fmt.Errorf("--balance-slack: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			eng, err := meta.open(ctx, &cfg, keyFile)
			if err != nil {
				return err
			}
			if eng == nil {
				err := serveMDS(ctx, cfg, &meta, addrFile, nil)
				cfg.Log.Info("mds stopping")
				return err
			}
			defer eng.Close()
			return leadAndServe(ctx, cfg, &meta, eng, addrFile)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "braid-mds", "directory holding the metadata store")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7000", "address to serve on (port 0 picks one)")
	f.StringVar(&keyFile, "key-file", "", "file with the cluster key shared with the OSDs, made if missing (default DIR/cluster.key)")
	f.StringVar(&credFile, "cred", "", "the MDS's credential (role mds; default DIR/auth/mds.cred, made with the CA if there is none)")
	f.StringVar(&addrFile, "addr-file", "", "write the address served on to this file once listening")
	f.StringVar(&cfg.DefaultLayout, "default-layout", "", "layout of new files where no directory sets one (default ec:4+2)")
	f.DurationVar(&cfg.OSDDownAfter, "osd-down-after", 5*time.Second, "heartbeat silence after which an OSD is down")
	addHealFlags(f, &cfg, &repairRate, &scrubRate)
	f.Float64Var(&cfg.MkdirSwitch, "mkdir-switch", 0.25, "probability that a new directory gets a slot of its own, not its parent's (how far a tree spreads over active MDS processes)")
	f.StringVar(&minFree, "min-free", "256MiB", "free space the metadata store's disk keeps: below it, new files and directories are refused (ENOSPC) and removals go on")
	f.StringVar(&balanceSlack, "balance-slack", "1GiB", "difference in stored bytes between the fullest and emptiest OSD left alone by rebalancing")
	meta.register(f)
	return cmd
}

// addHealFlags registers the failure-handling flags shared by mds and up.
func addHealFlags(f *pflag.FlagSet, cfg *mds.Config, repairRate, scrubRate *string) {
	f.DurationVar(&cfg.OSDOutAfter, "osd-out-after", 10*time.Minute, "silence after which a down OSD is out and its data is rebuilt on others")
	f.StringVar(repairRate, "repair-rate", "256MiB", "bytes per second each repair worker may write when rebuilding, catching up or draining")
	f.StringVar(scrubRate, "scrub-rate", "64MiB", "bytes per second each repair worker may read when scrubbing")
	f.DurationVar(&cfg.ScrubEvery, "scrub-every", 7*24*time.Hour, "period of the background scrub of every file (0 disables)")
	f.IntVar(&cfg.RepairWorkers, "healers", 4, "files the MDS repairs at once (negative: none; run braid heal elsewhere)")
	f.DurationVar(&cfg.IntentTTL, "intent-ttl", 2*time.Minute, "how long a staged partial-stripe write may stay open before recovery finishes it")
	f.DurationVar(&cfg.WriterLease, "writer-lease", 30*time.Second, "lease of a writer on its file; one that runs out gets the file scrubbed")
	f.DurationVar(&cfg.LockLease, "lock-lease", 4*time.Second, "how long a client's extent locks last without renewal (and how long a restarted MDS grants none)")
	f.DurationVar(&cfg.CapTTL, "cap-ttl", 10*time.Minute, "lifetime of the capabilities the MDS issues (open handles renew theirs before it ends)")
}

// parseRate reads a byte rate such as 100MiB (per second).
func parseRate(s string) (int64, error) {
	n, err := layout.ParseSize(strings.TrimSuffix(s, "/s"))
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, fmt.Errorf("rate must be positive")
	}
	return n, nil
}

// defaultClusterKey is DIR/cluster.key, made on the first start of a new
// metadata store only: a store that exists without it was started with
// another key file, which its OSDs hold, and a new key would lock them
// out.
func defaultClusterKey(dir string) (string, error) {
	path := filepath.Join(dir, "cluster.key")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if kv.EmbeddedExists(dir) {
		return "", fmt.Errorf("%s holds a metadata store but no cluster.key: give --key-file (the key its OSDs hold)", dir)
	}
	if err := capability.CreateKeyFile(path); err != nil {
		return "", fmt.Errorf("cluster key: %w", err)
	}
	return path, nil
}

func (e *env) osdCmd() *cobra.Command {
	var cfg osd.Config
	var keyFile, addrFile, capacity, credFile string
	cmd := &cobra.Command{
		Use:   "osd",
		Short: "run an object storage daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, err := capability.LoadKey(keyFile)
			if err != nil {
				return err
			}
			if credFile == "" {
				return fmt.Errorf("--cred is required: the OSD's credential (role osd), from `braid cred issue --role osd`")
			}
			if err := validDomain("--host", cfg.Host); err != nil {
				return err
			}
			if err := validDomain("--rack", cfg.Rack); err != nil {
				return err
			}
			if cfg.Credential, err = auth.LoadCredential(credFile); err != nil {
				return err
			}
			if capacity != "" {
				if cfg.CapacityBytes, err = layout.ParseSize(capacity); err != nil {
					return fmt.Errorf("--capacity: %w", err)
				}
			}
			cfg.Key, cfg.Log = key, e.logger()
			cfg.OnFatal = func(err error) {
				// The kernel may have dropped acknowledged data: stop rather
				// than keep serving it (see internal/osd/doc.go).
				cfg.Log.Error("fatal storage error; stopping", "err", err)
				os.Exit(3)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := osd.Start(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			cfg.Log.Info("osd serving", "addr", s.Addr(), "dir", cfg.Dir, "mds", cfg.MDSAddr)
			if err := announce(addrFile, s.Addr()); err != nil {
				return err
			}
			<-ctx.Done()
			cfg.Log.Info("osd stopping")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Dir, "dir", "braid-osd", "directory holding this OSD's objects")
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:0", "address to serve on (port 0 picks one)")
	f.StringVar(&cfg.MDSAddr, "mds-addr", "127.0.0.1:7000", "MDS to heartbeat to")
	f.StringVar(&keyFile, "key-file", "cluster.key", "file with the cluster key shared with the MDS")
	f.StringVar(&credFile, "cred", "", "the OSD's credential (role osd), to heartbeat to the MDS")
	f.BoolVar(&cfg.TLS, "tls", false, "serve the data path over TLS as --cred, to principals of its CA only")
	f.StringVar(&addrFile, "addr-file", "", "write the address served on to this file once listening")
	f.StringVar(&capacity, "capacity", "", "bytes this OSD may store, e.g. 100GiB (default: the file system's size)")
	f.DurationVar(&cfg.HeartbeatEvery, "heartbeat", time.Second, "interval between heartbeats to the MDS")
	f.BoolVar(&cfg.WriteCache, "write-cache", false, writeCacheHelp)
	f.BoolVar(&cfg.NoPack, "no-pack", false, "store every new object as files of its own instead of packing small ones into the log (for measuring)")
	f.StringVar(&cfg.Host, "host", "", "the machine this OSD is on (a failure domain): a parity group puts at most one component on a host where the cluster has enough hosts (default: an OSD is a host of its own)")
	f.StringVar(&cfg.Rack, "rack", "", "the rack this OSD is in (a failure domain): a parity group puts at most one component in a rack where the cluster has enough racks")
	cmd.AddCommand(e.osdDrainCmd(), e.osdAddCmd(), e.osdRmCmd())
	return cmd
}

const writeCacheHelp = "keep written data in the page cache (more CPU per byte written; rereads of recent data come from memory)\n" +
	"instead of writing large aligned writes straight to the disk"

func announce(path, addr string) error {
	if path == "" {
		return nil
	}
	return writeFileAtomic(path, []byte(addr+"\n"))
}

// mdsCredential is the MDS's credential: credFile, else DIR/auth/mds.cred,
// made on first start together with the cluster's CA and an
// administrator's credential when DIR/auth holds no CA yet.
func mdsCredential(dir, credFile string) (*auth.Credential, error) {
	if credFile != "" {
		return auth.LoadCredential(credFile)
	}
	caDir := filepath.Join(dir, authDirName)
	path := filepath.Join(caDir, mdsCredName)
	if _, err := os.Stat(path); err == nil || auth.HasCA(caDir) {
		return auth.LoadCredential(path)
	}
	if _, err := ensureCredential(caDir, filepath.Join(caDir, adminCred), auth.Principal{Name: "admin", Role: auth.RoleAdmin, AnyID: true}); err != nil {
		return nil, err
	}
	return ensureCredential(caDir, path, auth.Principal{Name: "mds", Role: auth.RoleMDS, AnyID: true})
}

// validDomain refuses a host or rack name the MDS would refuse.
func validDomain(flag, name string) error {
	if len(name) > mdsproto.MaxDomainBytes || strings.ContainsFunc(name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("%s %q: at most %d bytes, no control characters", flag, name, mdsproto.MaxDomainBytes)
	}
	return nil
}
