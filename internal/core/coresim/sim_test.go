package coresim

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// seeds is how many seeds TestCoreSimulation runs: BRAID_CORESIM_SEEDS,
// or 200. BRAID_CORESIM_SEED runs that one seed.
func seeds(t *testing.T) (first, n uint64) {
	if s := os.Getenv("BRAID_CORESIM_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v, 1
	}
	n = 200
	if s := os.Getenv("BRAID_CORESIM_SEEDS"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		n = v
	}
	return 1, n
}

// TestCoreSimulation runs the cores under many seeds; a failure names
// its seed, and BRAID_CORESIM_SEED=N replays it exactly.
func TestCoreSimulation(t *testing.T) {
	first, n := seeds(t)
	cfg := DefaultConfig()
	if os.Getenv("BRAID_CORESIM_TRACE") != "" {
		cfg.Trace = func(step int, op Op, now time.Duration, d []string) { t.Logf("%d +%v %s %v", step, now, op, d) }
	}
	var total [numOps]int
	for seed := first; seed < first+n; seed++ {
		rep, err := Run(cfg, seed)
		if err != nil {
			t.Fatalf("%v (replay: BRAID_CORESIM_SEED=%d go test -run TestCoreSimulation ./internal/core/coresim)", err, seed)
		}
		for op, c := range rep.Counts {
			total[op] += c
		}
	}
	// Every op was drawn, or the mix tests less than it says.
	for op, c := range total {
		if c == 0 && cfg.Weights[op] > 0 {
			t.Errorf("op %s never ran", Op(op))
		}
	}
}

// TestSeedReplaysExactly: the same seed makes the same decisions, and
// another seed others.
func TestSeedReplaysExactly(t *testing.T) {
	cfg := DefaultConfig()
	a, err := Run(cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(cfg, 42)
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Fatalf("seed 42 ran twice: digests %016x and %016x", a.Digest, b.Digest)
	}
	c, err := Run(cfg, 43)
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Fatal("seeds 42 and 43 made the same decisions")
	}
}

// BenchmarkCoreSimulation measures steps a second.
func BenchmarkCoreSimulation(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Steps = b.N
	if _, err := Run(cfg, 7); err != nil {
		b.Fatal(err)
	}
}
