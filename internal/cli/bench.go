package cli

import (
	"github.com/spf13/cobra"
)

func (e *env) benchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "measure throughput against a running cluster"}
}
