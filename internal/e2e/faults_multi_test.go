package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid/internal/testcluster"
)

// TestFaultInjectionSeveralMDS is TestFaultInjection's MDS faults with
// three active MDS processes (`braid up --mds-count 3 --all-active`,
// embedded etcd): coded and mirrored files in directories of every
// process's slots are overwritten while MDS processes, the leader among
// them, are SIGKILLed (with their etcd members) and started again as
// they were. Every write must succeed: a dead process's files wait for
// its session to lapse and another to take its slots; one started again
// takes slots back, and writers keep their locks across both. At the
// end every acknowledged byte reads back and every stripe agrees.
func TestFaultInjectionSeveralMDS(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	dir := filepath.Join(t.TempDir(), "cluster")
	startUp(t, e, dir, "--mds-count", "3", "--all-active", "--mkdir-switch", "1")
	waitAllActive(t, e, 3)
	cl := adminClient(t, e)
	model, sizes := fileModel{}, map[string]int{}
	var paths []string
	specs := []string{"ec:2+1,unit=64KiB", "mirror:3,unit=64KiB"}
	for i := range 6 {
		d := fmt.Sprintf("/d%d", i)
		if err := cl.Mkdir(ctx, d, false); err != nil {
			t.Fatal(err)
		}
		p := d + "/f"
		paths = append(paths, p)
		data := bytesOf(rng.Uint64(), 128<<10+rng.IntN(1<<20))
		createFile(t, cl, p, specs[i%2], data)
		model[p], sizes[p] = data, len(data)
	}
	owners := map[string]bool{}
	st := upStatusOf(t, e)
	for _, p := range paths {
		owners[st.ownerOf(inoOf(t, e, p))] = true
	}
	if len(owners) < 2 {
		t.Fatalf("the files' directories all went to one MDS process's slots: %v", owners)
	}
	wl := startWorkload(cl, paths, sizes, model, seed)
	kills := 0
	deadline := time.Now().Add(soakDuration(25 * time.Second))
	for time.Now().Before(deadline) && wl.healthy() {
		st := upStatusOf(t, e)
		victim := st.Meta.MDS[rng.IntN(len(st.Meta.MDS))]
		t.Logf("killing %s (%s, pid %d)", victim.Name, victim.Role, victim.Pid)
		relaunch := killForRelaunch(t, victim.Pid)
		kills++
		<-time.After(time.Duration(rng.IntN(2000)) * time.Millisecond) // the fault stays a while
		relaunch()
		waitAllActive(t, e, 3)
	}
	writes, err := wl.finish()
	if err != nil {
		t.Fatalf("a write failed although one MDS process at a time was killed: %v", err)
	}
	waitHealed(t, cl, 2*time.Minute)
	checked := verifyModel(t, cl, model, "after the MDS kills")
	t.Logf("FAULTS seed=%d writes=%d mds_kills=%d bytes_verified=%d bytes_lost=0", seed, writes, kills, checked)
}

// upStatusOf is braid status --json of the cluster braid up runs for e.
func upStatusOf(t *testing.T, e cliEnv) upStatus {
	t.Helper()
	var st upStatus
	if err := json.Unmarshal([]byte(e.must("status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitAllActive polls until n MDS processes serve, one leading, the
// routing table names them all, and every OSD is up.
func waitAllActive(t *testing.T, e cliEnv, n int) {
	t.Helper()
	var st upStatus
	var err error
	want := fmt.Sprintf("leader=1 active=%d", n-1)
	testcluster.Eventually(t, 90*time.Second, func() bool {
		var out string
		out, _, err = e.run("status", "--json")
		st = upStatus{}
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		return len(st.Meta.MDS) == n && st.roles() == want && len(st.Meta.Routing.Servers) == n && st.osdsUp() == len(st.OSDs)
	}, func() string { return fmt.Sprintf("%d MDS processes all active: %+v (%v)", n, st.Meta, err) })
}

// killForRelaunch SIGKILLs the process pid (a child of braid up) and
// returns what starts it again as it was: its command line, environment
// and working directory, as a child of the test, stopped when the test
// ends.
func killForRelaunch(t *testing.T, pid int) func() {
	t.Helper()
	read := func(name string) []string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	args, env := read("cmdline"), read("environ")
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 10*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || bytes.Contains(b, []byte(") Z ")) // gone, or dead and not yet reaped
	}, func() string { return fmt.Sprintf("pid %d outlived SIGKILL", pid) })
	return func() {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env, cmd.Dir = env, cwd
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no orphan if the test dies
		out, err := os.CreateTemp(t.TempDir(), "relaunched-*.log")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			out.Close()
		})
	}
}
