package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// TestAllActiveMDS: `braid up --mds-count 3 --all-active` runs three MDS
// processes that all serve, each the files of a third of the slots, one
// of them leading. Files written under directories of every process's
// slots read back whole; then the process serving the shared names'
// directory is SIGKILLed while four clients work on them, and the history
// across it is linearizable; its slots go to the two left, in a new
// epoch of the routing table.
func TestAllActiveMDS(t *testing.T) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	dir := filepath.Join(t.TempDir(), "cluster")
	up := startUp(t, e, dir, "--mds-count", "3", "--all-active")
	status := func() upStatus {
		var st upStatus
		if err := json.Unmarshal([]byte(e.must("status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitAllActive(t, e, 3)
	st := status()
	for _, s := range st.Meta.Routing.Servers {
		if s.Slots < 85 || s.Slots > 86 {
			t.Fatalf("slots uneven: %+v", st.Meta.Routing.Servers)
		}
	}

	// Directories until every process serves one (switching spreads
	// them), a file written in each and read back.
	src := filepath.Join(t.TempDir(), "src")
	data := bytes.Repeat([]byte("all active "), 300_000)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	served := map[string]string{} // process → a directory whose files it serves
	for i := 0; len(served) < 3 && i < 64; i++ {
		d := fmt.Sprintf("/d%d", i)
		e.must("mkdir", d)
		e.must("put", src, d+"/f")
		served[st.ownerOf(inoOf(t, e, d+"/f"))] = d
		out := filepath.Join(t.TempDir(), "out")
		e.must("get", d+"/f", out)
		if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s/f read back %d bytes (%v), wrote %d", d, len(got), err, len(data))
		}
	}
	if len(served) < 3 {
		t.Fatalf("64 directories' files went to %d processes", len(served))
	}

	e.must("mkdir", linDir)
	victim := st.ownerOf(inoOf(t, e, linDir))
	pid := 0
	for _, m := range st.Meta.MDS {
		if m.Name == victim {
			pid = m.Pid
		}
	}
	// A writer of a file the victim serves, with a partial stripe
	// buffered under its extent lock when the victim dies: the lock is
	// reclaimed from the process that takes the slot over, and the
	// writes land whole.
	cl := adminClient(t, e)
	ctx := context.Background()
	w, err := cl.Create(ctx, served[victim]+"/w", braid.CreateOptions{Mode: 0o644, SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	part := bytes.Repeat([]byte("w"), 100<<10)
	fault := func() {
		if _, err := w.WriteAt(part, 0); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	checkLinearizableAcross(t, e, up, fault, fmt.Sprintf("killed %s (pid %d), which served %s", victim, pid, linDir))
	if _, err := w.WriteAt(part, int64(len(part))); err != nil {
		t.Fatalf("a write after its file's MDS process died: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("closing a file written across its MDS process's death: %v", err)
	}
	r, err := cl.Open(ctx, served[victim]+"/w")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3*len(part))
	n, _ := r.ReadAt(got, 0)
	r.Close()
	if !bytes.Equal(got[:n], bytes.Repeat([]byte("w"), 2*len(part))) {
		t.Fatalf("read back %d bytes, wrote %d", n, 2*len(part))
	}

	var after upStatus
	testcluster.Eventually(t, 30*time.Second, func() bool {
		after = status()
		routed := len(after.Meta.Routing.Servers) == 2 && after.Meta.Routing.Epoch > st.Meta.Routing.Epoch
		for _, s := range after.Meta.Routing.Servers {
			routed = routed && s.Name != victim && s.Slots == 128
		}
		return len(after.Meta.MDS) == 2 && after.roles() == "leader=1 active=1" && routed
	}, func() string { return fmt.Sprintf("status after %s was killed: %+v", victim, after.Meta) })
}

// roles counts the MDS processes by role, as "leader=N active=N" (and
// standby=N if any).
func (s upStatus) roles() string {
	n := map[string]int{}
	for _, m := range s.Meta.MDS {
		n[m.Role]++
	}
	out := fmt.Sprintf("leader=%d active=%d", n["leader"], n["active"])
	if n["standby"] > 0 {
		out += fmt.Sprintf(" standby=%d", n["standby"])
	}
	return out
}

// ownerOf is the process the routing table gives ino's slot.
func (s upStatus) ownerOf(ino uint64) string {
	r := s.Meta.Routing
	if len(r.Owners) != 256 {
		return ""
	}
	return r.Servers[r.Owners[ino&255]].Name
}

var inoLine = regexp.MustCompile(`(?m)^ino:\s+(\d+)`)

// inoOf is the inode number of path, from braid stat.
func inoOf(t *testing.T, e cliEnv, path string) uint64 {
	t.Helper()
	m := inoLine.FindStringSubmatch(e.must("stat", path))
	if m == nil {
		t.Fatalf("braid stat %s prints no ino", path)
	}
	ino, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return ino
}
