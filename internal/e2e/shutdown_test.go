package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/testcluster"
)

// `braid up`, stopped (SIGTERM, as a service manager stops it), stopped
// its OSDs while the MDS's repair workers still scrubbed, so every shutdown
// logged "repair failed … connection refused". It stops the MDS first
// now, whose repair workers report their jobs interrupted. (Its children have
// process groups of their own too, so a terminal's Ctrl-C reaches up
// alone, which stops them in that order.)
func TestBraidUpStopsTheMDSBeforeItsOSDs(t *testing.T) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	dir := filepath.Join(t.TempDir(), "cluster")
	up := startUp(t, e, dir, "--scrub-rate", "64MiB")
	local := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(local, make([]byte, 64<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/a", "/b", "/c", "/d"} {
		e.must("put", local, name, "--layout", "ec:2+1,unit=64KiB")
	}
	scrub := exec.Command(e.bin, "scrub", "/") // waits for the scrub: left running
	scrub.Env = append(os.Environ(), "XDG_STATE_HOME="+e.state, "BRAID_MDS=")
	if err := scrub.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = scrub.Process.Kill(); _ = scrub.Wait() }()
	testcluster.Eventually(t, 30*time.Second, func() bool {
		out, _, err := e.run("status", "--json")
		var st struct {
			Repair struct {
				ActiveScrub int `json:"active_scrub"`
			} `json:"repair"`
		}
		return err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Repair.ActiveScrub > 0
	}, func() string { return "no scrub running" })
	_ = up.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-up.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("braid up did not stop: %s", up.out)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "logs", "mds*.log"))
	if len(logs) == 0 {
		t.Fatal("no MDS log")
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "repair failed") {
				t.Errorf("%s: %s", filepath.Base(l), line)
			}
		}
	}
}
