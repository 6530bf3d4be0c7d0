package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/testcluster"
)

// Linearizability of the namespace across an MDS failover. Clients work
// on a few shared names in one directory, each name a register: a put
// writes a file (or a symlink) under a name of its own and renames it
// over the register; a get reads it (a file's bytes, a symlink's target);
// a create makes it only if absent; a delete removes it; a list reads the
// directory. Every operation is recorded with when it was called and
// when it returned, and porcupine checks that some order of them,
// consistent with those times, is one a single namespace could have
// produced. An operation whose outcome the client could not learn (an
// error other than a definite answer) may have happened at any time
// after its call, or never.
//
// The history is checked per name; a list's answer is one observation
// per name (present or not), so a list is checked as if it read each
// name separately: weaker than a snapshot of the whole directory.

type linIn struct {
	Op  string // put, get, create, del, present
	Key string
	Val string // put, create: the value written
}

type linOut struct {
	Res string // ok, noent, exist, unknown
	Val string // get: the value read; present: "1" or "0"
}

const (
	linOK      = "ok"
	linNoent   = "noent"
	linExist   = "exist"
	linUnknown = "unknown"
)

// linModel is one name: its value, "" when absent.
var linModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(linIn).Key
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(linIn), output.(linOut)
		switch in.Op {
		case "put":
			return out.Res == linOK || out.Res == linUnknown, in.Val
		case "create":
			switch out.Res {
			case linOK:
				return st == "", in.Val
			case linExist:
				return st != "", st
			case linUnknown:
				if st == "" {
					return true, in.Val
				}
				return true, st
			}
		case "del":
			switch out.Res {
			case linOK:
				return st != "", ""
			case linNoent:
				return st == "", st
			case linUnknown:
				return true, ""
			}
		case "get":
			switch out.Res {
			case linOK:
				return st != "" && out.Val == st, st
			case linNoent:
				return st == "", st
			case linUnknown:
				return true, st
			}
		case "present":
			return out.Res == linUnknown || out.Val == map[bool]string{true: "1", false: "0"}[st != ""], st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linIn), output.(linOut)
		return fmt.Sprintf("%s(%s,%q) -> %s %q", in.Op, in.Key, in.Val, out.Res, out.Val)
	},
}

// linHistory collects operations from several clients.
type linHistory struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	kinds map[string]int // outcome counts, for the log
	odd   []string       // the first errors of unknown outcome, for the log
}

func (h *linHistory) now() int64 { return int64(time.Since(h.start)) }

func (h *linHistory) add(client int, call int64, in linIn, out linOut, err error) {
	ret := h.now()
	if out.Res == linUnknown {
		ret = math.MaxInt64 // it may take effect at any time after its call
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.kinds[in.Op+"/"+out.Res]++
	if out.Res == linUnknown && len(h.odd) < 5 {
		h.odd = append(h.odd, fmt.Sprintf("%s %s: %v", in.Op, in.Key, err))
	}
}

func (h *linHistory) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// linResult turns err into an outcome: a definite answer, or unknown.
func linResult(err error) string {
	switch {
	case err == nil:
		return linOK
	case errors.Is(err, braid.ErrNotFound):
		return linNoent
	case errors.Is(err, braid.ErrExists):
		return linExist
	}
	return linUnknown
}

const linDir = "/lin"

var linKeys = []string{"k0", "k1", "k2", "k3"}

// linClient runs random operations until stop is closed.
func linClient(ctx context.Context, cl *braid.Client, id int, h *linHistory, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(id), 7))
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		key := linKeys[rng.IntN(len(linKeys))]
		p := linDir + "/" + key
		val := fmt.Sprintf("c%d-%d", id, i)
		call := h.now()
		switch r := rng.IntN(10); {
		case r < 3: // put: a file or a symlink, renamed over the name
			tmp := fmt.Sprintf("%s/.tmp-%d-%d", linDir, id, i)
			if !linStage(ctx, cl, tmp, val, r == 0) {
				continue // not staged: nothing happened to the register
			}
			call = h.now()
			err := cl.Rename(ctx, tmp, p)
			h.add(id, call, linIn{Op: "put", Key: key, Val: val}, linOut{Res: linResult(err)}, err)
		case r < 4:
			err := linSymlink(ctx, cl, key, val)
			h.add(id, call, linIn{Op: "create", Key: key, Val: val}, linOut{Res: linResult(err)}, err)
		case r < 5:
			err := cl.Remove(ctx, p)
			h.add(id, call, linIn{Op: "del", Key: key}, linOut{Res: linResult(err)}, err)
		case r < 9:
			v, err := linGet(ctx, cl, p)
			h.add(id, call, linIn{Op: "get", Key: key}, linOut{Res: linResult(err), Val: v}, err)
		default:
			ents, err := cl.ReadDir(ctx, linDir)
			present := map[string]bool{}
			for _, e := range ents {
				present[e.Name] = true
			}
			for _, k := range linKeys {
				out := linOut{Res: linResult(err), Val: map[bool]string{true: "1", false: "0"}[present[k]]}
				h.add(id, call, linIn{Op: "present", Key: k}, out, err)
			}
		}
	}
}

// linStage makes tmp hold val: a symlink to it, or a file of its bytes.
func linStage(ctx context.Context, cl *braid.Client, tmp, val string, asLink bool) bool {
	if asLink {
		return linSymlink(ctx, cl, filepath.Base(tmp), val) == nil
	}
	f, err := cl.Create(ctx, tmp, braid.CreateOptions{Layout: "mirror:2", SizeHint: -1})
	if err != nil {
		return false
	}
	if _, err := f.WriteAt([]byte(val), 0); err != nil {
		f.Close()
		return false
	}
	return f.Close() == nil
}

func linSymlink(ctx context.Context, cl *braid.Client, name, target string) error {
	dir, err := cl.Stat(ctx, linDir)
	if err != nil {
		return err
	}
	_, err = cl.Symlink(ctx, dir.Ino, name, target, 0, 0)
	return err
}

// linGet reads a register: a symlink's target or a file's bytes.
func linGet(ctx context.Context, cl *braid.Client, p string) (string, error) {
	for range 10 {
		fi, err := cl.Stat(ctx, p)
		if err != nil {
			return "", err
		}
		if fi.Target != "" {
			return fi.Target, nil
		}
		f, err := cl.Open(ctx, p)
		if errors.Is(err, braid.ErrNotFound) || errors.Is(err, braid.ErrInvalid) {
			// Replaced between the stat and the open (gone, or now a
			// symlink): what was read is not one value; ask again rather
			// than record a guess.
			continue
		}
		if err != nil {
			return "", err
		}
		b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<10))
		f.Close()
		return string(b), err
	}
	return "", errors.New("the name changed under every read")
}

// upStatus is what the test reads of `braid status --json`.
type upStatus struct {
	Meta struct {
		MDS []struct {
			Name, Addr, Role string
			Pid              int
		} `json:"mds"`
		Members []struct {
			Name   string `json:"name"`
			Leader bool   `json:"leader"`
			Error  string `json:"error"`
		} `json:"members"`
		Routing struct {
			Epoch   uint64 `json:"epoch"`
			Servers []struct {
				Name  string `json:"name"`
				Slots int    `json:"slots"`
			} `json:"servers"`
			Owners []int `json:"owners"`
		} `json:"routing"`
	} `json:"meta"`
	OSDs []struct {
		State string `json:"state"`
	} `json:"osds"`
}

// osdsUp counts the OSDs status reports up.
func (s upStatus) osdsUp() int {
	n := 0
	for _, o := range s.OSDs {
		if o.State == "up" {
			n++
		}
	}
	return n
}

// routedTo reports whether the routing table sends all 256 slots to the
// process name.
func (s upStatus) routedTo(name string) bool {
	r := s.Meta.Routing
	return len(r.Servers) == 1 && r.Servers[0].Name == name && r.Servers[0].Slots == 256 && len(r.Owners) == 256
}

func (s upStatus) active() (name string, pid int, n int) {
	for _, m := range s.Meta.MDS {
		if m.Role == "active" {
			name, pid = m.Name, m.Pid
			n++
		}
	}
	return name, pid, n
}

// TestMDSFailoverIsLinearizable: `braid up --mds-count 3` runs three MDS
// processes on embedded etcd; four clients run operations on shared names
// while the active MDS fails: SIGKILLed, or paused (SIGSTOP) until a
// standby has taken over and then let run again (SIGCONT), when it must
// answer nothing more (it can no longer vouch for its lease) and stand
// by again.
// The clients carry on once a standby takes over, no acknowledged
// operation is lost or applied twice (the history is linearizable),
// status shows the new active and the missing etcd member, and, after the
// kill, `braid up` started again serves the same names.
func TestMDSFailoverIsLinearizable(t *testing.T) {
	t.Run("kill", func(t *testing.T) { failover(t, false) })
	t.Run("pause", func(t *testing.T) { failover(t, true) })
}

func failover(t *testing.T, pause bool) {
	e := cliEnv{t: t, bin: Binary(t), state: t.TempDir()}
	dir := filepath.Join(t.TempDir(), "cluster")
	up := startUp(t, e, dir, "--mds-count", "3")
	status := func() upStatus {
		var st upStatus
		if err := json.Unmarshal([]byte(e.must("status", "--json")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := status()
	oldName, oldPid, actives := st.active()
	if len(st.Meta.MDS) != 3 || actives != 1 || len(st.Meta.Members) != 3 || !st.routedTo(oldName) {
		t.Fatalf("status of braid up --mds-count 3: %+v", st.Meta)
	}
	e.must("mkdir", linDir)

	fault := func() {
		if pause {
			pauseActive(t, e, status, oldName, oldPid)
		} else if err := syscall.Kill(oldPid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	checkLinearizableAcross(t, e, up, fault, fmt.Sprintf("%s the active MDS %s", map[bool]string{true: "paused", false: "killed"}[pause], oldName))
	state, opts := adminOptions(t, e)
	ctx := context.Background()

	var after upStatus
	testcluster.Eventually(t, 30*time.Second, func() bool {
		after = status()
		newName, _, actives := after.active()
		unreachable := 0
		for _, m := range after.Meta.Members {
			if m.Error != "" {
				unreachable++
			}
		}
		// The new active took every slot, in a new epoch of the table.
		routed := after.routedTo(newName) && after.Meta.Routing.Epoch > st.Meta.Routing.Epoch
		if pause { // the paused process stands by again, its etcd member with it
			return len(after.Meta.MDS) == 3 && actives == 1 && newName != oldName && unreachable == 0 && routed
		}
		return len(after.Meta.MDS) == 2 && actives == 1 && newName != oldName && unreachable == 1 && routed
	}, func() string { return fmt.Sprintf("status after the failover of %s: %+v", oldName, after.Meta) })
	if pause {
		return
	}

	// Started again, the cluster serves the same names with three MDS.
	final := map[string]string{}
	cl, err := braid.DialOptions(ctx, state.MDS, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range linKeys {
		v, err := linGet(ctx, cl, linDir+"/"+k)
		if err != nil && !errors.Is(err, braid.ErrNotFound) {
			t.Fatal(err)
		}
		final[k] = v
	}
	cl.Close()
	_ = up.cmd.Process.Signal(syscall.SIGINT)
	<-up.done
	startUp(t, e, dir)
	testcluster.Eventually(t, 30*time.Second, func() bool {
		after = status()
		_, _, actives := after.active()
		return actives == 1 && len(after.Meta.MDS) == 3
	}, func() string { return fmt.Sprintf("after a restart: %+v", after.Meta) })
	cl, err = braid.DialOptions(ctx, state.MDS, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, k := range linKeys {
		var v string
		var err error
		testcluster.Eventually(t, 30*time.Second, func() bool {
			v, err = linGet(ctx, cl, linDir+"/"+k)
			return err == nil || errors.Is(err, braid.ErrNotFound)
		}, func() string { return fmt.Sprintf("%s after braid up restarted: %v", k, err) })
		if v != final[k] {
			t.Fatalf("%s after braid up restarted: %q (%v), was %q", k, v, err, final[k])
		}
	}
	e.fails("needs a new --dir", "up", "--dir", dir, "--mds-count", "1")
}

// pauseActive stops the active MDS (SIGSTOP) until another leads, lets it
// run again, and waits for it to see it no longer leads and stand by.
func pauseActive(t *testing.T, e cliEnv, status func() upStatus, name string, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	testcluster.Eventually(t, 90*time.Second, func() bool {
		out, _, err := e.run("status", "--json")
		var st upStatus
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		now, _, n := st.active()
		return n == 1 && now != name
	}, func() string { return "no standby took over from the paused active" })
	_ = syscall.Kill(pid, syscall.SIGCONT)
	resumed = true
	testcluster.Eventually(t, 60*time.Second, func() bool {
		out, _, err := e.run("status", "--json")
		var st upStatus
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			return false
		}
		for _, m := range st.Meta.MDS {
			if m.Name == name && m.Pid == pid && m.Role == "standby" {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("the paused active (pid %d) did not stand by again", pid) })
}

// readUpState reads the state file braid up wrote for e.
func readUpState(e cliEnv) (struct{ MDS, Cred string }, error) {
	var st struct{ MDS, Cred string }
	b, err := os.ReadFile(filepath.Join(e.state, "braid", "cluster.json"))
	if err != nil {
		return st, err
	}
	err = json.Unmarshal(b, &st)
	if st.MDS == "" || !strings.Contains(st.MDS, ",") {
		err = errors.Join(err, fmt.Errorf("state file names MDS %q, want three addresses", st.MDS))
	}
	return st, err
}

// checkLinearizableAcross runs four clients on the shared names of
// linDir (which must exist) against the cluster up serves, applies fault
// once 150 operations are recorded, goes on for 200 more, and checks
// that the history is linearizable with at least 150 definite outcomes
// after the fault.
func checkLinearizableAcross(t *testing.T, e cliEnv, up *upProc, fault func(), what string) {
	t.Helper()
	state, opts := adminOptions(t, e)
	ctx := context.Background()
	h := &linHistory{start: time.Now(), kinds: map[string]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range 4 {
		cl, err := braid.DialOptions(ctx, state.MDS, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		wg.Add(1)
		go func() { defer wg.Done(); linClient(ctx, cl, id, h, stop) }()
	}
	stopped := false
	stopClients := func() {
		if !stopped {
			close(stop)
			wg.Wait()
			stopped = true
		}
	}
	defer stopClients()
	waitOps := func(n int, what string) {
		testcluster.Eventually(t, 120*time.Second, func() bool { return h.len() >= n },
			func() string { return fmt.Sprintf("%s: %d operations recorded, want %d\n%s", what, h.len(), n, up.out) })
	}
	waitOps(150, "before the fault")
	faulted := time.Now()
	atFault := h.now()
	fault()
	waitOps(h.len()+200, "after the fault")
	stopClients()
	definite := 0
	for _, op := range h.ops {
		if op.Call > atFault && op.Output.(linOut).Res != linUnknown {
			definite++
		}
	}
	t.Logf("%s; %d operations in all, %d definite after it (%v later); outcomes %v; unknown: %q; each kind's first answer to an operation begun after the fault came %v after it",
		what, h.len(), definite, time.Since(faulted).Round(time.Second), h.kinds, h.odd, resumedAfter(h.ops, atFault))
	if definite < 150 {
		t.Fatalf("only %d operations with a definite outcome after the fault: the history says little", definite)
	}

	res, info := porcupine.CheckOperationsVerbose(linModel, h.ops, 2*time.Minute)
	if res != porcupine.Ok {
		vis := filepath.Join(os.TempDir(), fmt.Sprintf("braid-linearizability-%d.html", time.Now().UnixNano()))
		if f, err := os.Create(vis); err == nil {
			_ = porcupine.Visualize(linModel, info, f)
			f.Close()
		}
		t.Fatalf("the history across the failover is %s (not linearizable); visualization in %s", res, vis)
	}
}

// resumedAfter is, for each kind of operation and outcome, how long after the fault
// (at) the first one begun after it got a definite answer: how soon
// clients went on (a measurement for the log, not a test of speed).
func resumedAfter(ops []porcupine.Operation, at int64) map[string]time.Duration {
	first := map[string]time.Duration{}
	for _, op := range ops {
		in, out := op.Input.(linIn), op.Output.(linOut)
		if op.Call <= at || out.Res == linUnknown {
			continue
		}
		d := time.Duration(op.Return - at).Round(100 * time.Millisecond)
		if k := in.Op + "/" + out.Res; first[k] == 0 || d < first[k] {
			first[k] = max(d, 1) // 0 means none yet
		}
	}
	return first
}

// adminOptions are the cluster braid up recorded for e, and client
// options with its administrator's credential and an I/O timeout past a
// failover.
func adminOptions(t *testing.T, e cliEnv) (struct{ MDS, Cred string }, braid.Options) {
	t.Helper()
	state, err := readUpState(e)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := braid.LoadCredential(state.Cred)
	if err != nil {
		t.Fatal(err)
	}
	opts := braid.DefaultOptions
	opts.Credential = admin
	opts.IOTimeout = 60 * time.Second
	return state, opts
}

// adminClient is a client of the cluster braid up runs for e, closed
// when the test ends.
func adminClient(t *testing.T, e cliEnv) *braid.Client {
	t.Helper()
	state, opts := adminOptions(t, e)
	c, err := braid.DialOptions(context.Background(), state.MDS, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
