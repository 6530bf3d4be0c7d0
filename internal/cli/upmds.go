package cli

// `braid up --mds-count N` runs N MDS processes, each with an etcd member
// inside (braid mds --meta-peers): one active and N-1 standbys on a Raft
// quorum of N. Their addresses are fixed on the first run and kept in
// DIR/mds.json, because etcd members know each other by their peer URLs
// and clients are given every MDS address up front: a standby does not
// listen until it leads, so its port cannot be learnt from it.
//
// With --all-active every one of them serves (Slice's routing), and any
// count from 1 to 7 is allowed: one then runs on a one-member etcd.
//
//	DIR/mds.json  {"v":1,"mds":[{"name","dir","listen","client_url","peer_url"}, ...],"all_active":bool}

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/braidfs/braid/internal/durable"
	"github.com/braidfs/braid/internal/mds"
)

const (
	mdsTopologyFile = "mds.json"
	maxMDSCount     = 7 // etcd members one braid up runs: past 7, Raft's writes only slow down
)

// upMDS is one MDS process of a local cluster.
type upMDS struct {
	Name      string `json:"name"`
	Dir       string `json:"dir"`
	Listen    string `json:"listen"`
	ClientURL string `json:"client_url"`
	PeerURL   string `json:"peer_url"`
}

type mdsTopology struct {
	V         int     `json:"v"`
	MDS       []upMDS `json:"mds"`
	AllActive bool    `json:"all_active,omitempty"`
}

// checkMDSCount refuses counts etcd's quorum makes no sense of: with one
// active and standbys, a standby is there to outlive a failure.
func checkMDSCount(n int, allActive bool) error {
	if allActive && n >= 1 && n <= maxMDSCount {
		return nil
	}
	if n < 1 || n > maxMDSCount || n%2 == 0 {
		return fmt.Errorf("--mds-count %d: want 1, 3, 5 or 7 (a quorum of N etcd members outlives (N-1)/2 failures; an even N outlives no more than N-1)", n)
	}
	return nil
}

// mdsLayout returns the MDS processes of the cluster in dir: those of
// DIR/mds.json, else, on a first run, count new ones (count 1: the
// embedded store in DIR/mds, as before --mds-count existed). countSet
// says whether --mds-count was given; a count that differs from the
// cluster's is then refused, since moving a namespace between engines is
// not something up does.
func mdsLayout(dir string, count int, countSet, allActive, allActiveSet bool) ([]upMDS, bool, error) {
	if err := checkMDSCount(count, allActive); err != nil {
		return nil, false, err
	}
	path := filepath.Join(dir, mdsTopologyFile)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		var t mdsTopology
		if err := json.Unmarshal(b, &t); err != nil || t.V != 1 || checkMDSCount(len(t.MDS), t.AllActive) != nil || (len(t.MDS) < 2 && !t.AllActive) {
			return nil, false, fmt.Errorf("%s: not a braid up MDS topology (v1, 3..%d processes): %v", path, maxMDSCount, err)
		}
		if countSet && count != len(t.MDS) {
			return nil, false, fmt.Errorf("this cluster runs %d MDS processes (%s); --mds-count %d needs a new --dir", len(t.MDS), path, count)
		}
		if allActiveSet && allActive != t.AllActive {
			return nil, false, fmt.Errorf("this cluster runs with --all-active=%v (%s); changing it needs a new --dir", t.AllActive, path)
		}
		return t.MDS, t.AllActive, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, err
	}
	single := []upMDS{{Name: "mds", Dir: filepath.Join(dir, "mds"), Listen: "127.0.0.1:0"}}
	if count == 1 && !allActive {
		return single, false, nil
	}
	if _, err := os.Stat(single[0].Dir); err == nil {
		return nil, false, fmt.Errorf("this cluster keeps its metadata in one MDS's embedded store (%s); --mds-count %d needs a new --dir", single[0].Dir, count)
	}
	ports, err := freePorts(3 * count)
	if err != nil {
		return nil, false, err
	}
	t := mdsTopology{V: 1, AllActive: allActive}
	for i := range count {
		name := fmt.Sprintf("mds%d", i)
		t.MDS = append(t.MDS, upMDS{Name: name, Dir: filepath.Join(dir, name),
			Listen:    fmt.Sprintf("127.0.0.1:%d", ports[3*i]),
			ClientURL: fmt.Sprintf("https://127.0.0.1:%d", ports[3*i+1]),
			PeerURL:   fmt.Sprintf("https://127.0.0.1:%d", ports[3*i+2])})
	}
	if err := shareMDSKeys(t.MDS); err != nil {
		return nil, false, err
	}
	b, _ = json.MarshalIndent(t, "", "  ")
	return t.MDS, allActive, writeFileAtomic(path, b)
}

// freePorts picks n distinct ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick ports for the MDS processes: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// shareMDSKeys makes the first MDS's key files and copies them to the
// others, which must hold the same (braid mds checks it at start).
func shareMDSKeys(ms []upMDS) error {
	for _, m := range ms {
		if err := os.MkdirAll(m.Dir, 0o700); err != nil {
			return err
		}
	}
	files, err := mds.EnsureKeyFiles(ms[0].Dir)
	if err != nil {
		return err
	}
	for _, m := range ms[1:] {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			if err := durable.WriteFile(filepath.Join(m.Dir, filepath.Base(f)), b, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// mdsArgs are the command-line arguments of m beyond those every MDS of
// the cluster shares.
func mdsArgs(ms []upMDS, m upMDS) []string {
	args := []string{"--dir", m.Dir, "--listen", m.Listen}
	if embeddedStore(ms) {
		return args
	}
	var peers []string
	for _, o := range ms {
		peers = append(peers, o.Name+"="+o.PeerURL)
	}
	return append(args, "--meta-peers", strings.Join(peers, ","), "--meta-name", m.Name, "--meta-client-url", m.ClientURL)
}

// embeddedStore reports whether the cluster's one MDS keeps its metadata
// in its own directory (no etcd).
func embeddedStore(ms []upMDS) bool { return len(ms) == 1 && ms[0].PeerURL == "" }

// mdsAddrs is the address list clients and OSDs are given.
func mdsAddrs(ms []upMDS, children []*child) string {
	if embeddedStore(ms) {
		return children[0].addr
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Listen)
	}
	return strings.Join(out, ",")
}

// startMDSChildren starts every MDS process and waits until one serves
// (an etcd quorum formed and one of them leads); the others stand by.
func startMDSChildren(ctx context.Context, dir string, ms []upMDS, common []string) ([]*child, error) {
	var out []*child
	for _, m := range ms {
		c, err := launchChild(dir, m.Name, m.Dir, append([]string{"mds"}, append(mdsArgs(ms, m), common...)...))
		if err != nil {
			stopChildren(out)
			return nil, err
		}
		out = append(out, c)
	}
	deadline := time.Now().Add(upReadyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for _, c := range out {
			if c.readAddr() {
				return out, nil
			}
		}
		exited := 0
		for _, c := range out {
			select {
			case <-c.done:
				exited++
			default:
			}
		}
		if exited > len(out)/2 {
			stopChildren(out)
			return nil, fmt.Errorf("%d of %d MDS processes exited during start-up (see %s)", exited, len(out), filepath.Join(dir, "logs"))
		}
		select {
		case <-ctx.Done():
			stopChildren(out)
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	stopChildren(out)
	return nil, fmt.Errorf("no MDS process served within %v (see %s)", upReadyTimeout, filepath.Join(dir, "logs"))
}
