package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
)

func (e *env) statusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show the cluster map: OSDs, their state and capacity",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withClient(func(ctx context.Context, c *braid.Client) error {
				st, err := c.Status(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(e.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(st)
				}
				return e.printStatus(st)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print machine-readable JSON")
	return cmd
}

// printMeta shows the metadata service: its engine (with etcd, each
// member's health) and its MDS processes.
func printMeta(tw *tabwriter.Writer, m mdsproto.MetaStatus) {
	if m.Engine == "etcd" {
		fmt.Fprintln(tw, "ETCD MEMBER\tENDPOINT\tRAFT\tDB\tTERM\tINDEX")
		for _, em := range m.Members {
			raft, db := "follower", human(em.DBBytes)
			switch {
			case em.Error != "":
				raft, db = "unreachable: "+em.Error, "-"
			case em.Leader:
				raft = "leader"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", orDash(em.Name), orDash(em.Endpoint), raft, db, em.RaftTerm, em.RaftIndex)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "MDS (%s store)\tADDRESS\tROLE\tPID\tHOST\n", m.Engine)
	for _, p := range m.MDS {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", p.Name, orDash(p.Addr), p.Role, p.Pid, p.Host)
	}
	fmt.Fprintln(tw)
	if r := m.Routing; r != nil {
		fmt.Fprintf(tw, "ROUTING (epoch %d)\tADDRESS\tSLOTS\n", r.Epoch)
		for _, s := range r.Servers {
			fmt.Fprintf(tw, "%s\t%s\t%d of %d\n", s.Name, orDash(s.Addr), s.Slots, len(r.Owners))
		}
		fmt.Fprintln(tw)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

func (e *env) printStatus(st braid.Status) error {
	up := st.UpOSDs()
	spec := st.DefaultLayout
	if s, err := layout.Parse(spec); err == nil {
		spec = s.String()
	}
	fmt.Fprintf(e.stdout, "cluster %s: %d of %d OSDs up; default layout %s\n", st.ClusterID, up, len(st.OSDs), spec)
	fmt.Fprintf(e.stdout, "namespace: %d files, %d directories, %s of file data\n", st.Files, st.Dirs, human(st.LogicalBytes))
	fmt.Fprintf(e.stdout, "capacity: %s used of %s\n", human(st.UsedBytes), human(st.CapacityBytes))
	if pd := st.PendingDelete; pd.OpenBytes > 0 {
		fmt.Fprintf(e.stdout, "removed files still open: %s (freed at their last close)\n", human(pd.OpenBytes))
	}
	if pd := st.PendingDelete; pd.Objects > 0 {
		fmt.Fprintf(e.stdout, "removed files and failed writes: %s in %d objects awaiting deletion, the next in %v, all in %v (handles opened before the removal may read them until then)\n",
			human(pd.Bytes), pd.Objects, max(0, time.Until(time.Unix(0, pd.NextNs))).Round(time.Second),
			max(0, time.Until(time.Unix(0, max(pd.LastNs, pd.NextNs)))).Round(time.Second))
	}
	e.printHealth(st)
	fmt.Fprintln(e.stdout)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	printMeta(tw, st.Meta)
	domains := slices.ContainsFunc(st.OSDs, func(o mdsproto.OSDStatus) bool { return o.Host != "" || o.Rack != "" })
	head := "OSD\tADDRESS\tSTATE\tCOMPONENTS\tUSED\tFREE\tPID"
	if domains {
		head += "\tHOST\tRACK"
	}
	fmt.Fprintln(tw, head)
	for _, o := range st.OSDs {
		state := o.State
		if o.Draining {
			state += ",draining"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%d", o.ID, o.Addr, state, o.Components, human(o.UsedBytes), human(o.FreeBytes), o.Pid)
		if domains {
			fmt.Fprintf(tw, "\t%s\t%s", orDash(o.Host), orDash(o.Rack))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
