// Package cli implements the braid command line: server roles (mds, osd),
// the local-cluster supervisor (up), and client commands.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
)

// env is what commands share: flags, streams and the client, if dialled.
type env struct {
	mdsAddr  string
	credFile string
	logLevel string
	stdout   io.Writer
	stderr   io.Writer
}

// Main runs the command line and returns the process exit code.
func Main(args []string) int {
	e := &env{stdout: os.Stdout, stderr: os.Stderr}
	root := e.rootCmd()
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(e.stderr, "braid:", err)
		return 1
	}
	return 0
}

func (e *env) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "braid",
		Short:         "braid: a parallel, object-based file system with per-file erasure coding",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&e.mdsAddr, "mds", "", "MDS address (default $BRAID_MDS, else the cluster started by braid up)")
	root.PersistentFlags().StringVar(&e.credFile, "cred", "", "credential to act as (default $BRAID_CRED, else the administrator's credential of the cluster started by braid up)")
	root.PersistentFlags().StringVar(&e.logLevel, "log-level", "info", "server log level: debug, info, warn, error")
	root.AddCommand(e.upCmd(), e.mdsCmd(), e.osdCmd(), e.putCmd(), e.getCmd(), e.lsCmd(), e.statCmd(),
		e.rmCmd(), e.mkdirCmd(), e.layoutCmd(), e.statusCmd(), e.benchCmd(), e.scrubCmd(), e.healCmd(), e.checkCmd(), e.recoverCmd(), e.mountCmd(), e.s3Cmd(), e.credCmd(), e.keyCmd(), e.simCmd())
	return root
}

func (e *env) logger() *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(e.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
}

// xdgDir is $env, else ~/fallback (the XDG base-directory rule).
func xdgDir(env, fallback string) string {
	if dir := os.Getenv(env); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, fallback)
}

// stateFile is where `braid up` records the running cluster, so that
// clients in other terminals find it.
func stateFile() string {
	return filepath.Join(xdgDir("XDG_STATE_HOME", ".local/state"), "braid", "cluster.json")
}

// upState is the content of the state file.
type upState struct {
	MDS  string      `json:"mds"`
	Dir  string      `json:"dir"`
	Pid  int         `json:"pid"`
	OSDs []upProcess `json:"osds"`
	S3   string      `json:"s3,omitempty"`   // the gateway's address, with --s3
	Cred string      `json:"cred,omitempty"` // the administrator's credential
}

type upProcess struct {
	Dir  string `json:"dir"`
	Addr string `json:"addr"`
	Pid  int    `json:"pid"`
}

func readState() (upState, error) {
	var st upState
	b, err := os.ReadFile(stateFile())
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", stateFile(), err)
	}
	return st, nil
}

// resolveMDS finds the cluster: --mds, else $BRAID_MDS, else the state file.
func (e *env) resolveMDS() (string, error) {
	if e.mdsAddr != "" {
		return e.mdsAddr, nil
	}
	if a := os.Getenv("BRAID_MDS"); a != "" {
		return a, nil
	}
	st, err := readState()
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no cluster: give --mds ADDR, set BRAID_MDS, or start one with `braid up`")
	}
	if err != nil {
		return "", err
	}
	return st.MDS, nil
}

func (e *env) client(ctx context.Context) (*braid.Client, error) {
	return e.clientWith(ctx, func(*braid.Options) {})
}

// clientWith is client with its options changed by set first.
func (e *env) clientWith(ctx context.Context, set func(*braid.Options)) (*braid.Client, error) {
	addr, err := e.resolveMDS()
	if err != nil {
		return nil, err
	}
	cred, err := e.credential(addr)
	if err != nil {
		return nil, err
	}
	opts := braid.DefaultOptions
	opts.Credential = cred
	set(&opts)
	return braid.DialOptions(ctx, addr, opts)
}

// withClient runs fn with a client, closing it after.
func (e *env) withClient(fn func(ctx context.Context, c *braid.Client) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := e.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// writeFileAtomic writes b to path via a temporary file and rename.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
