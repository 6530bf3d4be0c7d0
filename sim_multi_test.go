package braid_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"testing"
	"testing/synctest"
)

// The simulation with three MDS processes sharing the namespace (on
// kv.Shared, the twin of etcd): the files live in directories of
// different processes' slots, renames cross them, and the MDS fault kills
// one process (its session lapses, another takes its slots over, the
// lead passes if it held it) and starts it again, which takes slots back
// from the others. BRAID_SIM_SEEDS runs more, as for TestSimulation.
func TestSimulationSeveralMDS(t *testing.T) {
	seeds := simSeeds(t, 2)
	if os.Getenv("BRAID_SEED") == "" {
		seeds = append(seeds, simMultiRegressions...)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				trace := runSimWith(t, seed, 40, 3)
				t.Logf("seed %d: %d steps, trace %x", seed, strings.Count(trace, "\n"), sha256.Sum256([]byte(trace)))
			})
		})
	}
}

// simMultiRegressions are seeds past those simci runs that found bugs
// with several MDS processes, run in every suite: 146 (a held file's
// locks reclaimed at a slot's new owner while its handle stayed in the
// session of the process that had restarted; lock.go's meet).
var simMultiRegressions = []uint64{146}

// simDirs are the directories the files live in with several MDS
// processes: each its own slot (mkdir switching), so the files spread
// over the processes and renames cross them. With one MDS the files live
// in the root, as when the regression seeds were recorded.
var simDirs = []string{"/a", "/b", "/c", "/d"}

// filePath is the name of the workload's file number i.
func (s *sim) filePath(i int) string {
	if s.mdsCount < 2 {
		return fmt.Sprintf("/f%d", i)
	}
	return fmt.Sprintf("%s/f%d", simDirs[i%len(simDirs)], i)
}

// killMDS kills one of several MDS processes (with its session in the
// metadata engine: it lapses on its own): files in its slots wait for
// the session to lapse and another process to take them over, the lead
// passes if it held it. Files are written meanwhile; then it starts again
// and takes slots back.
func (s *sim) killMDS() {
	i := s.rng.IntN(s.mdsCount)
	s.logf("fault: MDS %d killed", i)
	s.c.KillMDS(i)
	s.writeUnderFault()
	s.logf("fault: MDS %d started again", i)
	s.c.StartMDS(i)
}
