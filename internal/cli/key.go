package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
)

func (e *env) keyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "key", Short: "manage the key that signs capabilities"}
	cmd.AddCommand(&cobra.Command{
		Use:   "rotate",
		Short: "sign capabilities with a new key, with no downtime (the old one is accepted until what it signed expires)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				id, retire, err := c.RotateKey(ctx)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "capability key %d is current; the keys before it are refused from %s\n", id, retire.Format(time.RFC3339))
				return nil
			})
		},
	})
	return cmd
}
