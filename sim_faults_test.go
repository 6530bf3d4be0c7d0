package braid_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"

	"github.com/braidfs/braid"
	"github.com/braidfs/braid/internal/osd"
)

// diskFaults is what the simulation's disk twin fails now: operations op
// on files under dir, about one in oneIn, with err. Safe for concurrent
// use (the OSDs call fault from their goroutines).
type diskFaults struct {
	mu    sync.Mutex
	dir   string // "" : nothing fails
	op    osd.FaultOp
	err   error
	oneIn int
	rng   *rand.Rand
	n     int // operations failed
}

func (d *diskFaults) set(dir string, op osd.FaultOp, err error, oneIn int, seed uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dir, d.op, d.err, d.oneIn, d.rng, d.n = dir+"/", op, err, oneIn, rand.New(rand.NewPCG(seed, 0xd15c)), 0
}

// clear ends the fault and returns how many operations it failed.
func (d *diskFaults) clear() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dir = ""
	return d.n
}

func (d *diskFaults) fault(op osd.FaultOp, p string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dir == "" || op != d.op || !strings.HasPrefix(p, d.dir) || d.rng.IntN(d.oneIn) != 0 {
		return nil
	}
	d.n++
	return &osErr{op: string(op), path: p, err: d.err}
}

type osErr struct {
	op, path string
	err      error
}

func (e *osErr) Error() string { return e.op + " " + e.path + ": " + e.err.Error() }
func (e *osErr) Unwrap() error { return e.err }

// moreFaults injects one of the fault kinds added after the regression
// seeds were recorded: an OSD's replies lost after it acted on the
// requests, the MDS restarted, an OSD's disk failing reads or writes with
// EIO, or full. While it lasts every file is read, files are written (a
// full disk may refuse a put, which must then leave the old file whole)
// and a held file is written; then it ends and the cluster must heal.
// Its draws come from generators derived from rng3, so the older seeds'
// rng and rng2 draws stay as they were.
func (s *sim) moreFaults() {
	saved, saved2 := s.rng, s.rng2
	s.rng, s.rng2 = rand.New(rand.NewPCG(s.rng3.Uint64(), 1)), rand.New(rand.NewPCG(s.rng3.Uint64(), 2))
	defer func() { s.rng, s.rng2 = saved, saved2 }()
	for _, h := range s.held {
		h.faults++
	}
	i := s.live[s.rng.IntN(len(s.live))]
	dir := s.c.OSDDir(i)
	switch s.rng.IntN(5) {
	case 0:
		addr := s.c.OSDs[i].Addr()
		s.nw.LoseReplies(addr, 3+s.rng.IntN(8), s.rng.Uint64())
		s.logf("fault: OSD %d loses replies", i)
		s.writeUnderFault()
		n := s.nw.LostReplies(addr)
		s.nw.LoseReplies(addr, 0, 0)
		s.logf("fault: OSD %d lost %d replies", i, n)
	case 1:
		s.logf("fault: MDS restarted")
		s.c.RestartMDS()
		s.writeUnderFault()
	case 2:
		s.dfs.set(dir, osd.FaultRead, syscall.EIO, 1+s.rng.IntN(3), s.rng.Uint64())
		s.logf("fault: OSD %d's disk fails reads (EIO)", i)
		s.writeUnderFault()
		s.logf("fault: OSD %d's disk failed %d reads", i, s.dfs.clear())
	case 3:
		s.dfs.set(dir, osd.FaultWrite, syscall.EIO, 1+s.rng.IntN(3), s.rng.Uint64())
		s.logf("fault: OSD %d's disk fails writes (EIO)", i)
		s.writeUnderFault()
		s.logf("fault: OSD %d's disk failed %d writes", i, s.dfs.clear())
	case 4:
		s.dfs.set(dir, osd.FaultWrite, syscall.ENOSPC, 1, s.rng.Uint64())
		s.logf("fault: OSD %d's disk full", i)
		s.verifyAll("OSD full")
		s.putMayFail(braid.ErrNoSpace)
		s.logf("fault: OSD %d's disk refused %d writes", i, s.dfs.clear())
	}
	s.verifyAll("after a fault")
	for _, p := range heldPaths {
		if s.held[p] != nil && s.rng.IntN(2) == 0 {
			s.syncHeldFile(p)
		}
	}
	s.scrubAll()
	s.waitHealthy()
}

// writeUnderFault reads every file, writes one, puts one and writes a
// held file: within what the layouts tolerate, all succeed.
func (s *sim) writeUnderFault() {
	s.verifyAll("under a fault")
	s.overwrite()
	s.put()
	s.heldStep()
}

// putMayFail puts a file atomically, over an existing one or not, where
// the put may fail with want: then the old file must read back whole (or,
// for a new name, not exist).
func (s *sim) putMayFail(want error) {
	p := fmt.Sprintf("/f%d", s.rng.IntN(12))
	data := randBytes(s.rng, 1+s.rng.IntN(600<<10))
	f, err := s.client().Create(ctx, p, braid.CreateOptions{SizeHint: int64(len(data)), Atomic: true})
	if err == nil {
		_, err = f.ReadFrom(bytes.NewReader(data))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	s.logf("put %s %d (may fail): %v", p, len(data), err)
	if err == nil {
		s.model[p] = data
		return
	}
	if !errors.Is(err, want) {
		s.fatalf("put %s: %v, want success or %v", p, err, want)
	}
	got, rerr := get(s.t, s.client(), p)
	old, existed := s.model[p]
	switch {
	case !existed && !errors.Is(rerr, braid.ErrNotFound):
		s.fatalf("a failed put of new file %s left it behind: %d bytes, %v", p, len(got), rerr)
	case existed && rerr != nil:
		s.fatalf("after a failed put over %s: read: %v", p, rerr)
	case existed && !bytes.Equal(got, old):
		s.fatalf("a failed put over %s changed it: %s", p, s.describe(p, got, old))
	}
}
