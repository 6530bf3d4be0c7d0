package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/testcluster"
)

// The fault-injection runs. Their length is BRAID_SOAK (a duration; the
// default suits CI); BRAID_SEED replays a run.

func soakDuration(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("BRAID_SOAK")); err == nil && d > 0 {
		return d
	}
	return def
}

func testSeed(t *testing.T) uint64 {
	seed := rand.Uint64()
	if v, err := strconv.ParseUint(os.Getenv("BRAID_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (replay with BRAID_SEED=%d)", seed, seed)
	return seed
}

func bytesOf(seed uint64, n int) []byte {
	b := make([]byte, n)
	_, _ = io.ReadFull(newSeeded(seed, int64(n)), b)
	return b
}

// faultFiles are the files the fault runs write: coded and mirrored.
var faultSpecs = []string{"ec:4+2,unit=64KiB", "mirror:3,unit=64KiB"}

// fileModel is what a file must hold: every acknowledged write applied.
type fileModel map[string][]byte

func (m fileModel) apply(op writeOp) {
	data := m[op.path]
	if end := op.off + len(op.data); end > len(data) {
		data = append(data, make([]byte, end-len(data))...)
	}
	copy(data[op.off:], op.data)
	m[op.path] = data
}

type writeOp struct {
	path string
	off  int
	data []byte
}

// nextOp draws one overwrite: mostly part of a stripe (two-phase commit),
// sometimes whole stripes, now and then growing the file.
func nextOp(rng *rand.Rand, paths []string, sizes map[string]int) writeOp {
	p := paths[rng.IntN(len(paths))]
	n := 1 + rng.IntN(64<<10)
	if rng.IntN(4) == 0 {
		n = 256<<10 + rng.IntN(512<<10)
	}
	off := rng.IntN(sizes[p] + 1)
	if rng.IntN(8) != 0 {
		off = rng.IntN(max(1, sizes[p]-n))
	}
	sizes[p] = max(sizes[p], off+n)
	return writeOp{path: p, off: off, data: bytesOf(rng.Uint64(), n)}
}

func writeOnce(cl *braid.Client, op writeOp) error {
	f, err := cl.OpenFile(ctx, op.path, true)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(op.data, int64(op.off)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func createFile(t *testing.T, cl *braid.Client, p, spec string, data []byte) {
	t.Helper()
	f, err := cl.Create(ctx, p, braid.CreateOptions{Layout: spec, SizeHint: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// waitHealed polls until the cluster is healthy with no repair left.
func waitHealed(t *testing.T, cl *braid.Client, timeout time.Duration) braid.Status {
	t.Helper()
	var st braid.Status
	testcluster.Eventually(t, timeout, func() bool {
		var err error
		st, err = cl.Status(ctx)
		return err == nil && st.Health == mdsproto.HealthOK && st.Repair.FilesLeft == 0 && st.Repair.Active == 0 &&
			st.Repair.ScrubQueued == 0
	}, func() string { return fmt.Sprintf("not healed: %s %q %+v", st.Health, st.Problems, st.Repair) })
	return st
}

func verifyModel(t *testing.T, cl *braid.Client, model fileModel, what string) (bytesChecked int64) {
	t.Helper()
	for p, want := range model {
		f, err := cl.Open(ctx, p)
		if err != nil {
			t.Fatalf("%s: open %s: %v", what, p, err)
		}
		var buf bytes.Buffer
		_, err = f.WriteTo(&buf)
		f.Close()
		if err != nil || !bytes.Equal(buf.Bytes(), want) {
			t.Fatalf("%s: %s: read %d bytes (err %v), want %d acknowledged bytes; first difference at %d",
				what, p, buf.Len(), err, len(want), firstDiff(buf.Bytes(), want))
		}
		bytesChecked += int64(len(want))
	}
	rep, err := cl.Check(ctx, "/")
	if err != nil || len(rep.Problems) > 0 || rep.Unverified > 0 {
		t.Fatalf("%s: checker: err %v, %d unverified stripes, problems %q", what, err, rep.Unverified, rep.Problems)
	}
	return bytesChecked
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// faultTally counts what a run did, for its closing report.
type faultTally struct {
	mu                          sync.Mutex
	osdKills, doubleKills, outs int
	mdsKills, writes            int
}

func (f *faultTally) add(p *int) { f.mu.Lock(); *p++; f.mu.Unlock() }

// TestFaultInjection writes and overwrites ec:4+2 and mirror:3 files while
// OSDs and the MDS are SIGKILLed and restarted at random (never more OSDs
// at once than the layouts tolerate: two, and only one long enough to be
// declared out and rebuilt), then waits for repairing and checks every
// acknowledged byte and every stripe.
func TestFaultInjection(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	c := StartCluster(t, 7, "--osd-out-after", "4s", "--intent-ttl", "3s", "--writer-lease", "3s", "--scrub-every", "0")
	cl := c.Client()
	model, sizes := fileModel{}, map[string]int{}
	var paths []string
	for i := 0; i < 8; i++ {
		p := fmt.Sprintf("/f%d", i)
		paths = append(paths, p)
		data := bytesOf(rng.Uint64(), 256<<10+rng.IntN(2<<20))
		createFile(t, cl, p, faultSpecs[i%2], data)
		model[p], sizes[p] = data, len(data)
	}
	var tally faultTally
	wl := startWorkload(cl, paths, sizes, model, seed)
	deadline := time.Now().Add(soakDuration(25 * time.Second))
	for time.Now().Before(deadline) && wl.healthy() {
		injectFault(t, c, cl, rng, &tally)
	}
	tally.writes = wl.stop(t, c)
	waitHealed(t, cl, 2*time.Minute)
	checked := verifyModel(t, cl, model, "after the fault run")
	t.Logf("FAULTS seed=%d writes=%d osd_kills=%d double_kills=%d rebuilt_outs=%d mds_kills=%d bytes_verified=%d bytes_lost=0",
		seed, tally.writes, tally.osdKills, tally.doubleKills, tally.outs, tally.mdsKills, checked)
}

// workload overwrites files in the background, applying each
// acknowledged write to the model.
type workload struct {
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	writes int
}

func startWorkload(cl *braid.Client, paths []string, sizes map[string]int, model fileModel, seed uint64) *workload {
	w := &workload{done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(seed, 2))
		for {
			select {
			case <-w.done:
				return
			default:
			}
			op := nextOp(rng, paths, sizes)
			if err := writeOnce(cl, op); err != nil {
				w.mu.Lock()
				w.err = fmt.Errorf("write %s at %d (+%d): %w", op.path, op.off, len(op.data), err)
				w.mu.Unlock()
				return
			}
			model.apply(op)
			w.mu.Lock()
			w.writes++
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *workload) healthy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err == nil
}

// stop ends the workload, failing the test if any write failed (the
// faults stay within what the layouts tolerate), and returns the count of
// acknowledged writes.
func (w *workload) stop(t *testing.T, c *Cluster) int {
	t.Helper()
	n, err := w.finish()
	if err != nil {
		t.Fatalf("a write failed although faults stayed within tolerance: %v\n%s", err, c.Logs())
	}
	return n
}

// finish ends the workload and returns its count of acknowledged writes,
// and the error that stopped it early, if one did.
func (w *workload) finish() (int, error) {
	close(w.done)
	w.wg.Wait()
	return w.writes, w.err
}

// injectFault applies one random fault, undoes it, and waits until the
// cluster has healed, so the next fault never stacks beyond tolerance.
func injectFault(t *testing.T, c *Cluster, cl *braid.Client, rng *rand.Rand, tally *faultTally) {
	t.Helper()
	hold := func(d time.Duration) { <-time.After(d) } // keep the fault in place for a while
	switch rng.IntN(10) {
	case 0, 1, 2, 3: // one OSD, sometimes past the out grace period
		v := c.OSDs[rng.IntN(len(c.OSDs))]
		v.Kill()
		tally.add(&tally.osdKills)
		d := time.Duration(300+rng.IntN(2500)) * time.Millisecond
		if rng.IntN(3) == 0 {
			d = 7 * time.Second // out after 4s: rebuilt elsewhere
			tally.add(&tally.outs)
		}
		hold(d)
		c.Restart(v)
	case 4, 5, 6: // two OSDs, back before they are out
		perm := rng.Perm(len(c.OSDs))
		a, b := c.OSDs[perm[0]], c.OSDs[perm[1]]
		a.Kill()
		b.Kill()
		tally.add(&tally.doubleKills)
		hold(time.Duration(300+rng.IntN(2000)) * time.Millisecond)
		c.Restart(a)
		c.Restart(b)
	default: // the MDS
		c.MDS.Kill()
		tally.add(&tally.mdsKills)
		hold(time.Duration(rng.IntN(500)) * time.Millisecond)
		c.Restart(c.MDS)
	}
	c.WaitUp(len(c.OSDs))
	waitHealed(t, cl, 2*time.Minute)
}

// The client is killed mid-write, over and over: every intent it left is
// rolled forward or back, its lease runs out and the file is scrubbed;
// afterwards no stripe is inconsistent and every byte holds either what
// the last acknowledged write left or what the interrupted one wrote.
func TestClientKilledMidWrite(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 3))
	c := StartCluster(t, 6, "--intent-ttl", "2s", "--writer-lease", "2s", "--scrub-every", "0")
	cl := c.Client()
	const fileBytes = 1 << 20
	model := fileModel{}
	var paths []string
	for i := 0; i < 4; i++ {
		p := fmt.Sprintf("/c%d", i)
		paths = append(paths, p)
		model[p] = bytesOf(rng.Uint64(), fileBytes)
		createFile(t, cl, p, faultSpecs[i%2], model[p])
	}
	rounds := int(soakDuration(20*time.Second) / (4 * time.Second))
	for round := 0; round < max(rounds, 3); round++ {
		wseed := rng.Uint64()
		before, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acked := runWriterUntilKilled(t, c.MDS.Addr, c.AdminCred, wseed, time.Duration(100+rng.IntN(900))*time.Millisecond)
		// Replay the writer's acknowledged ops; the one after them may be
		// partly applied.
		wrng := rand.New(rand.NewPCG(wseed, 0))
		sizes := map[string]int{}
		for _, p := range paths {
			sizes[p] = len(model[p])
		}
		for i := 0; i < acked; i++ {
			model.apply(clampOp(nextOp(wrng, paths, sizes), fileBytes))
		}
		inFlight := clampOp(nextOp(wrng, paths, sizes), fileBytes)
		var st braid.Status
		testcluster.Eventually(t, 60*time.Second, func() bool {
			st, err = cl.Status(ctx)
			return err == nil && st.Writers == 0 && st.Intents == 0 &&
				st.Repair.ScrubQueued == 0 && st.Repair.Active == 0 && st.Health == mdsproto.HealthOK
		}, func() string { return fmt.Sprintf("dead writer not cleaned up: %+v", st) })
		scrubbed := st.Repair.ScrubbedFiles - before.Repair.ScrubbedFiles
		after := fileModel{}
		for p, old := range model {
			f, err := cl.Open(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			_, err = f.WriteTo(&buf)
			f.Close()
			if err != nil {
				t.Fatalf("round %d: read %s: %v", round, p, err)
			}
			got := buf.Bytes()
			next := append([]byte(nil), old...)
			if p == inFlight.path {
				copy(next[inFlight.off:], inFlight.data)
			}
			if len(got) != len(old) {
				t.Fatalf("round %d: %s is %d bytes, want %d", round, p, len(got), len(old))
			}
			for i := range got {
				if got[i] != old[i] && got[i] != next[i] {
					t.Fatalf("round %d: %s byte %d is neither the acknowledged nor the interrupted write's (acked %d ops)", round, p, i, acked)
				}
			}
			after[p] = got
		}
		model = after
		rep, err := cl.Check(ctx, "/")
		if err != nil || len(rep.Problems) > 0 || rep.Unverified > 0 {
			t.Fatalf("round %d: checker: err %v, problems %q, unverified %d", round, err, rep.Problems, rep.Unverified)
		}
		t.Logf("round %d: writer killed after %d acknowledged overwrites; %d files scrubbed after its lease ran out", round, acked, scrubbed)
	}
}

// clampOp keeps an overwrite inside files of fixed size n, so the
// killed-writer rounds never change sizes.
func clampOp(op writeOp, n int) writeOp {
	if len(op.data) > n {
		op.data = op.data[:n]
	}
	op.off = min(op.off, n-len(op.data))
	return op
}

// runWriterUntilKilled runs this test binary as a writer process (see
// TestMain) and SIGKILLs it after d. It returns how many writes it had
// acknowledged.
func runWriterUntilKilled(t *testing.T, mdsAddr, cred string, seed uint64, d time.Duration) (acked int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("BRAID_E2E_WRITER=%s,%d,%s", mdsAddr, seed, cred))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timer := time.After(d)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				done = true
				break
			}
			if n, err := strconv.Atoi(strings.TrimPrefix(l, "ok ")); err == nil {
				acked = n
			}
		case <-timer:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			timer = nil
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer process ended with %v before it was killed", err)
	}
	return acked
}

// runWriter is the writer process: it overwrites the /c* files with the
// ops its seed draws, printing "ok N" after the N-th acknowledged one.
func runWriter(spec string) {
	parts := strings.SplitN(spec, ",", 3)
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "writer: want ADDR,SEED,CRED, got", spec)
		os.Exit(2)
	}
	addr, credPath := parts[0], parts[2]
	seed, _ := strconv.ParseUint(parts[1], 10, 64)
	cred, err := braid.LoadCredential(credPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(2)
	}
	opts := braid.DefaultOptions
	opts.Credential = cred
	cl, err := braid.DialOptions(ctx, addr, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(2)
	}
	paths := []string{"/c0", "/c1", "/c2", "/c3"}
	sizes := map[string]int{}
	for _, p := range paths {
		sizes[p] = 1 << 20
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	for i := 1; ; i++ {
		if err := writeOnce(cl, clampOp(nextOp(rng, paths, sizes), 1<<20)); err != nil {
			fmt.Fprintln(os.Stderr, "writer:", err)
			os.Exit(2)
		}
		fmt.Printf("ok %d\n", i)
	}
}

func TestMain(m *testing.M) {
	if spec := os.Getenv("BRAID_E2E_WRITER"); spec != "" {
		runWriter(spec)
	}
	os.Exit(m.Run())
}
