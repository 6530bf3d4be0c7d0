package cli

import (
	"context"
	"encoding/json"
	"fmt"
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

func (e *env) s3UserCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "manage S3 access keys (kept by the MDS)"}
	var asJSON bool
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "create a user with a new access key and secret (the secret is shown only now)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				u, err := c.S3UserAdd(ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(e.stdout).Encode(map[string]string{"name": u.Name, "access_key": u.AccessKey, "secret_key": u.SecretKey})
				}
				fmt.Fprintf(e.stdout, "user %s\naccess key: %s\nsecret key: %s\n", u.Name, u.AccessKey, u.SecretKey)
				return nil
			})
		},
	}
	add.Flags().BoolVar(&asJSON, "json", false, `print {"access_key": …, "secret_key": …}`)
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
				fmt.Fprintln(tw, "NAME\tACCESS KEY\tCREATED")
				for _, u := range users {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", u.Name, u.AccessKey, time.Unix(0, u.CreatedNs).Format(time.RFC3339))
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
