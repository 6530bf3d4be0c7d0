package cli

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/braidfs/braid/internal/auth"
)

// Credential files a cluster directory's auth/ holds (`braid up`, and a
// `braid mds` started without --cred).
const (
	authDirName = "auth"
	mdsCredName = "mds.cred"
	adminCred   = "admin.cred"
)

// ensureCredential returns the credential at path, issuing it for p from
// the CA in caDir (made first if caDir has none) when path does not
// exist yet.
func ensureCredential(caDir, path string, p auth.Principal) (*auth.Credential, error) {
	if _, err := os.Stat(path); err == nil {
		return auth.LoadCredential(path)
	}
	ca, err := ensureCA(caDir)
	if err != nil {
		return nil, err
	}
	c, err := ca.Issue(p, time.Now())
	if err != nil {
		return nil, err
	}
	return c, c.Save(path)
}

// ensureCA loads the CA in dir, making one if there is none.
func ensureCA(dir string) (*auth.CA, error) {
	if auth.HasCA(dir) {
		return auth.LoadCA(dir)
	}
	ca, err := auth.NewCA(filepath.Base(filepath.Dir(dir)), time.Now())
	if err != nil {
		return nil, err
	}
	return ca, ca.Save(dir)
}

// credential is who client commands talking to the MDS at mdsAddr are:
// --cred, else $BRAID_CRED, else the administrator's credential of the
// cluster `braid up` started, if that is the one at mdsAddr.
func (e *env) credential(mdsAddr string) (*auth.Credential, error) {
	path := e.credFile
	if path == "" {
		path = os.Getenv("BRAID_CRED")
	}
	if path == "" {
		if st, err := readState(); err == nil && st.MDS == mdsAddr {
			path = st.Cred
		}
	}
	if path == "" {
		return nil, fmt.Errorf("no credential: give --cred FILE or set BRAID_CRED (issue one with `braid cred issue`; `braid up` makes %s under its directory)", filepath.Join(authDirName, adminCred))
	}
	return auth.LoadCredential(path)
}

func (e *env) credCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cred", Short: "issue and show credentials (certificates of the cluster's CA)"}
	var p auth.Principal
	var uids, gids []uint
	var caDir, out string
	issue := &cobra.Command{
		Use:   "issue",
		Short: "issue a credential from the cluster's CA (run where its ca.key is: CLUSTERDIR/auth)",
		Long: "issue writes a credential (0600) for one principal. Roles: " + strings.Join(auth.Roles, ", ") + ".\n" +
			"A client asserts only the uids and gids it names (--uid, --gid), or any with --any-id\n" +
			"(a mount serving a machine's users, a gateway).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out FILE is required")
			}
			if _, err := os.Stat(out); err == nil {
				return fmt.Errorf("%s exists; not overwriting it", out)
			}
			for _, u := range uids {
				if u > math.MaxUint32 {
					return fmt.Errorf("--uid %d: past the largest uid", u)
				}
				p.UIDs = append(p.UIDs, uint32(u))
			}
			for _, g := range gids {
				if g > math.MaxUint32 {
					return fmt.Errorf("--gid %d: past the largest gid", g)
				}
				p.GIDs = append(p.GIDs, uint32(g))
			}
			ca, err := auth.LoadCA(caDir)
			if err != nil {
				return fmt.Errorf("the CA in %s: %w", caDir, err)
			}
			c, err := ca.Issue(p, time.Now())
			if err != nil {
				return err
			}
			if err := c.Save(out); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "issued %s to %s\n", c.Principal, out)
			return nil
		},
	}
	f := issue.Flags()
	f.StringVar(&caDir, "ca", filepath.Join(defaultDataDir(), authDirName), "directory of the CA (ca.pem, ca.key): braid up's DIR/auth, or braid mds's")
	f.StringVar(&p.Role, "role", auth.RoleClient, "role: "+strings.Join(auth.Roles, ", "))
	f.StringVar(&p.Name, "name", "", "the principal's name")
	f.UintSliceVar(&uids, "uid", nil, "uid the principal may act as (repeatable)")
	f.UintSliceVar(&gids, "gid", nil, "gid the principal may act as (repeatable)")
	f.BoolVar(&p.AnyID, "any-id", false, "may act as any uid and gid, root included")
	f.StringVarP(&out, "out", "o", "", "file to write the credential to")
	show := &cobra.Command{
		Use:   "show FILE",
		Short: "print the principal a credential names",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := auth.LoadCredential(args[0])
			if err != nil {
				return err
			}
			p := c.Principal
			fmt.Fprintf(e.stdout, "name: %s\nrole: %s\n", p.Name, p.Role)
			switch {
			case p.AnyID:
				fmt.Fprintln(e.stdout, "identities: any")
			default:
				fmt.Fprintf(e.stdout, "uids: %v\ngids: %v\n", p.UIDs, p.GIDs)
			}
			return nil
		},
	}
	cmd.AddCommand(issue, show)
	return cmd
}
