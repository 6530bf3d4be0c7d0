package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/braidfs/braid"
)

// progress wraps a transfer in a progress bar when stderr is a terminal.
func (e *env) progress(size int64, what string) io.Writer {
	if f, ok := e.stderr.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		return io.Discard
	}
	return progressbar.DefaultBytes(size, what)
}

// countProgress is a bar counting n things (files), drawn only on a
// terminal.
func (e *env) countProgress(n int64, what string) *progressbar.ProgressBar {
	if f, ok := e.stderr.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		return progressbar.DefaultSilent(n, what)
	}
	return progressbar.Default(n, what)
}

// rateProgress shows a walk's progress: files done and bytes read, with
// the rate; a bar on a terminal, else a line on stderr every
// progressLineEvery. Calls come from one goroutine at a time; files < 0
// ends it.
func (e *env) rateProgress(what string) func(files, bytes int64) {
	if f, ok := e.stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.DefaultBytes(-1, what)
		return func(files, bytes int64) {
			if files < 0 {
				_ = bar.Finish()
				return
			}
			bar.Describe(fmt.Sprintf("%s: %d files", what, files))
			_ = bar.Set64(bytes)
		}
	}
	start := time.Now()
	last := start
	return func(files, bytes int64) {
		if now := time.Now(); files >= 0 && now.Sub(last) >= progressLineEvery {
			last = now
			fmt.Fprintf(e.stderr, "%s: %d files, %s read, %s/s\n", what, files, human(bytes),
				human(int64(float64(bytes)/max(now.Sub(start).Seconds(), 1e-3))))
		}
	}
}

// progressLineEvery spaces progress lines where no bar is drawn.
const progressLineEvery = 10 * time.Second

func (e *env) putCmd() *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:   "put LOCAL PATH",
		Short: "copy a local file into braid (replacing PATH if it exists)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				return e.put(ctx, c, args[0], args[1], spec)
			})
		},
	}
	cmd.Flags().StringVar(&spec, "layout", "", "layout spec, e.g. ec:4+2,unit=1MiB (default: inherited from the directory)")
	return cmd
}

func (e *env) put(ctx context.Context, c *braid.Client, local, dst, spec string) error {
	src, err := os.Open(local)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", local)
	}
	if di, err := c.Stat(ctx, dst); err == nil && di.IsDir {
		dst = path.Join(dst, path.Base(local))
	}
	// Atomic: the name is replaced only when every byte is on the OSDs, so
	// a put that fails leaves the old file whole (or, new, nothing).
	f, err := c.Create(ctx, dst, braid.CreateOptions{Layout: spec, SizeHint: fi.Size(), Mode: uint32(fi.Mode().Perm()), Atomic: true})
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(io.TeeReader(src, e.progress(fi.Size(), "put "+path.Base(dst)))); err != nil {
		_ = f.Abort() // the old file stays; the new one is freed
		return err
	}
	return f.Close()
}

func (e *env) getCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get PATH LOCAL",
		Short: "copy a braid file to a local file (- for standard output)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				return e.get(ctx, c, args[0], args[1])
			})
		},
	}
}

func (e *env) get(ctx context.Context, c *braid.Client, src, local string) error {
	f, err := c.Open(ctx, src)
	if err != nil {
		return err
	}
	defer f.Close()
	if local == "-" {
		_, err = f.WriteTo(e.stdout)
		return err
	}
	st, err := os.Stat(local)
	if err == nil && st.IsDir() {
		local = path.Join(local, path.Base(src))
		st, err = os.Stat(local)
	}
	// A regular file is written under a temporary name and renamed, so a
	// failed get leaves no partial file under the real name; a device or a
	// pipe (/dev/null, a FIFO) is written in place: a rename would replace it.
	inPlace := err == nil && !st.Mode().IsRegular()
	target, flags := local, os.O_WRONLY
	if !inPlace {
		target, flags = local+".braid-partial", os.O_WRONLY|os.O_CREATE|os.O_TRUNC
		defer os.Remove(target)
	}
	dst, err := os.OpenFile(target, flags, 0o666)
	if err != nil {
		return err
	}
	if _, err := f.WriteTo(io.MultiWriter(dst, e.progress(f.Size(), "get "+path.Base(src)))); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil || inPlace {
		return err
	}
	return os.Rename(target, local)
}

func (e *env) lsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls [PATH]",
		Short: "list a directory",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := "/"
			if len(args) == 1 {
				p = args[0]
			}
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				fi, err := c.Stat(ctx, p)
				if err != nil {
					return err
				}
				ents := []braid.FileInfo{fi}
				if fi.IsDir {
					if ents, err = c.ReadDir(ctx, p); err != nil {
						return err
					}
				}
				return printListing(e.stdout, ents)
			})
		},
	}
}

func (e *env) statCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stat PATH",
		Short: "show a file's attributes, layout, and which OSD holds which component",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				fi, err := c.Stat(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "path:     %s\ntype:     %s\nino:      %d\nsize:     %d\nmode:     %s\nowner:    %d:%d\nmodified: %s\nlinks:    %d\n",
					args[0], typeName(fi.Type), fi.Ino, fi.Size, fi.Mode, fi.Uid, fi.Gid, fi.ModTime.Format(time.RFC3339Nano), fi.Nlink)
				switch fi.Type {
				case braid.TypeSymlink:
					fmt.Fprintf(e.stdout, "target:   %s\n", fi.Target)
				case braid.TypeCharDev, braid.TypeBlockDev:
					fmt.Fprintf(e.stdout, "device:   %d:%d\n", unix.Major(fi.Rdev), unix.Minor(fi.Rdev))
				}
				if fi.IsDir {
					li, err := c.GetLayout(ctx, args[0])
					if err == nil {
						fmt.Fprintf(e.stdout, "layout:   %s (default for new files%s)\n", li.Spec, map[bool]string{true: ", set here", false: ", inherited"}[li.Explicit])
					}
					return err
				}
				l := fi.Layout
				if l == nil {
					return nil // symlinks and special files hold no data
				}
				fmt.Fprintf(e.stdout, "layout:   %s\ngroups:   %d\nversion:  %d\ncomponents:\n", l.Spec, l.Groups, l.Version)
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "  COMP\tGROUP\tOSD\tADDRESS\tSTATE")
				for _, comp := range l.Components {
					state := "down"
					if comp.Up {
						state = "up"
					}
					if comp.Dirty {
						state += ", dirty (read by reconstruction until repaired)"
					}
					fmt.Fprintf(tw, "  %d\t%d\t%d\t%s\t%s\n", comp.Index, comp.Group, comp.OSD, comp.Addr, state)
				}
				return tw.Flush()
			})
		},
	}
}

// typeName is how braid stat names an inode type.
func typeName(t string) string {
	if name, ok := typeNames[t]; ok {
		return name
	}
	return t
}

// typeNames are how braid stat names inode types.
var typeNames = map[string]string{
	braid.TypeFile:     "file",
	braid.TypeDir:      "directory",
	braid.TypeSymlink:  "symlink",
	braid.TypeFIFO:     "fifo",
	braid.TypeSocket:   "socket",
	braid.TypeCharDev:  "character device",
	braid.TypeBlockDev: "block device",
}

func (e *env) rmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm PATH...",
		Short: "remove files or empty directories",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				var errs []error
				for _, p := range args {
					if err := c.Remove(ctx, p); err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", p, err))
					}
				}
				return errors.Join(errs...)
			})
		},
	}
}

func (e *env) mkdirCmd() *cobra.Command {
	var parents bool
	cmd := &cobra.Command{
		Use:   "mkdir PATH...",
		Short: "create directories",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				for _, p := range args {
					if err := c.Mkdir(ctx, p, parents); err != nil {
						return fmt.Errorf("%s: %w", p, err)
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&parents, "parents", "p", false, "create missing parents; an existing directory is fine")
	return cmd
}

func (e *env) layoutCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "layout", Short: "get or set a file's or directory's layout"}
	cmd.AddCommand(&cobra.Command{
		Use:   "get PATH",
		Short: "print the layout of a file, or the default layout of a directory",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				li, err := c.GetLayout(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, li.Spec)
				return nil
			})
		},
	}, &cobra.Command{
		Use:   "set PATH SPEC",
		Short: "set a directory's default layout (inherited by new files) or an empty file's layout",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				return c.SetLayout(ctx, args[0], args[1])
			})
		},
	})
	return cmd
}

// printListing prints one line per entry: mode, size, modification time,
// right-aligned in columns, then the name as its bytes. Names are not
// put through a tabwriter, which takes byte 0xff for its escape and
// counts widths in UTF-8.
func printListing(w io.Writer, ents []braid.FileInfo) error {
	modeWidth, sizeWidth := 1, 1
	for _, en := range ents {
		modeWidth = max(modeWidth, len(en.Mode.String()))
		sizeWidth = max(sizeWidth, len(strconv.FormatInt(en.Size, 10)))
	}
	bw := bufio.NewWriter(w)
	for _, en := range ents {
		name := en.Name
		if en.IsDir {
			name += "/"
		}
		fmt.Fprintf(bw, "%*s  %*d  %s  %s\n", modeWidth, en.Mode, sizeWidth, en.Size, en.ModTime.Format(time.DateTime), name)
	}
	return bw.Flush()
}
