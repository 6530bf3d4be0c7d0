package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/s3gw"
)

func (e *env) s3Cmd() *cobra.Command {
	cfg := s3gw.Config{Listen: "127.0.0.1:9000"}
	var addrFile string
	cmd := &cobra.Command{
		Use:   "s3",
		Short: "serve the namespace over S3 (buckets are top-level directories); Ctrl-C stops",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				srv, err := s3gw.Start(ctx, c, cfg)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "braid S3 gateway on http://%s (region %s); keys: braid s3 user add NAME\n", srv.Addr(), cfg.Region)
				if err := announce(addrFile, srv.Addr()); err != nil {
					_ = srv.Close()
					return err
				}
				<-ctx.Done() // Ctrl-C or SIGTERM
				return srv.Close()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to serve S3 on (port 0: any free port)")
	f.StringVar(&cfg.Region, "region", "us-east-1", "region clients sign for")
	f.StringVar(&addrFile, "addr-file", "", "write the listening address to this file once serving")
	cmd.AddCommand(e.s3UserCmd())
	return cmd
}

func adminNote(admin bool) string {
	if admin {
		return ", admin"
	}
	return ""
}

func (e *env) s3UserCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "manage S3 access keys (kept by the MDS)"}
	var asJSON bool
	var uid, gid uint32
	var groups []uint
	var spec braid.S3UserSpec
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "create a user with a new access key and secret (the secret is shown only now)",
		Long: `Create an S3 user. It owns the buckets it creates and acts as its own uid
and gid: its objects are owned by them, and reading or overwriting an object
needs that identity's read or write permission. Without --uid it gets the next
uid of the S3 users' range (200000 up), and its gid is its uid. --admin makes a
user that reaches every bucket, as root.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[0]
			if cmd.Flags().Changed("uid") {
				spec.Uid = &uid
			}
			if cmd.Flags().Changed("gid") {
				spec.Gid = &gid
			}
			for _, g := range groups {
				if g > math.MaxUint32 {
					return fmt.Errorf("--groups: %d is no gid", g)
				}
				spec.Groups = append(spec.Groups, uint32(g))
			}
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				u, err := c.S3UserCreate(ctx, spec)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(e.stdout).Encode(map[string]any{"name": u.Name, "access_key": u.AccessKey, "secret_key": u.SecretKey,
						"uid": u.Uid, "gid": u.Gid, "groups": u.Groups, "admin": u.Admin})
				}
				fmt.Fprintf(e.stdout, "user %s (uid %d, gid %d%s)\naccess key: %s\nsecret key: %s\n", u.Name, u.Uid, u.Gid, adminNote(u.Admin), u.AccessKey, u.SecretKey)
				return nil
			})
		},
	}
	af := add.Flags()
	af.BoolVar(&asJSON, "json", false, `print {"access_key": …, "secret_key": …, "uid": …}`)
	af.Uint32Var(&uid, "uid", 0, "the uid the user acts as (default: the next of the S3 users' range)")
	af.Uint32Var(&gid, "gid", 0, "the user's primary gid (default: its uid)")
	af.UintSliceVar(&groups, "groups", nil, "supplementary gids, comma-separated")
	af.BoolVar(&spec.Admin, "admin", false, "reach every bucket and object, as root")
	var listJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "list users and their access keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				users, err := c.S3Users(ctx)
				if err != nil {
					return err
				}
				if listJSON {
					return json.NewEncoder(e.stdout).Encode(users)
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tACCESS KEY\tUID\tGID\tROLE\tCREATED")
				for _, u := range users {
					role := "user"
					if u.Admin {
						role = "admin"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", u.Name, u.AccessKey, u.Uid, u.Gid, role, time.Unix(0, u.CreatedNs).Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "machine-readable output")
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "delete a user; its key stops working",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error { return c.S3UserRemove(ctx, args[0]) })
		},
	}
	cmd.AddCommand(add, list, rm)
	return cmd
}
