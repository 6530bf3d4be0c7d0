package braid_test

import (
	"math/rand/v2"
	"sync"

	"github.com/braidfs/braid"
)

// sharedWorkload runs one of the workloads added with extent locks, on
// draws from rng5 (so the older generators draw as they did): every
// client writing one file at once, or a burst of small writes.
func (s *sim) sharedWorkload() {
	saved, saved2 := s.rng, s.rng2
	s.rng, s.rng2 = rand.New(rand.NewPCG(s.rng5.Uint64(), 1)), rand.New(rand.NewPCG(s.rng5.Uint64(), 2))
	defer func() { s.rng, s.rng2 = saved, saved2 }()
	if s.rng.IntN(2) == 0 {
		s.sharedWrite()
	} else {
		s.smallWrites()
	}
}

// sharedFile is the file every client writes at once (N-to-1). Other
// steps may rename or remove it like any file; it is then made again.
const sharedFile = "/s0"

// sharedWrite has every client open the shared file and write, all at
// once, interleaved blocks that share stripes (a block is rarely a
// divisor of a unit), then close it: every block lands, and the file is
// as long as the last one reaches.
func (s *sim) sharedWrite() {
	old, ok := s.model[s.sharedPath]
	if !ok {
		spec := simLayouts[s.rng.IntN(len(simLayouts))]
		f, err := s.cls[0].Create(ctx, s.sharedPath, braid.CreateOptions{Layout: spec, SizeHint: -1})
		if err == nil {
			err = f.Close()
		}
		s.logf("shared create %s %q: %v", s.sharedPath, spec, err)
		if err != nil {
			s.fatalf("create %s: %v", s.sharedPath, err)
		}
	}
	bs, n := 1+s.rng.IntN(48<<10), 2+s.rng.IntN(10)
	base := s.rng.IntN(len(old) + 64<<10)
	data := randBytes(s.rng, bs*n)
	errs := make([]error, len(s.cls))
	var wg sync.WaitGroup
	for w, cl := range s.cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := cl.OpenFile(ctx, s.sharedPath, true)
			if err != nil {
				errs[w] = err
				return
			}
			for i := w; i < n && err == nil; i += len(s.cls) {
				_, err = f.WriteAt(data[i*bs:(i+1)*bs], int64(base+i*bs))
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			errs[w] = err
		}()
	}
	wg.Wait()
	s.logf("shared write %s at %d: %d blocks of %d bytes by %d clients: %v", s.sharedPath, base, n, bs, len(s.cls), errs)
	for w, err := range errs {
		if err != nil {
			s.fatalf("shared write %s by client %d: %v", s.sharedPath, w, err)
		}
	}
	next := append(old, make([]byte, max(0, base+len(data)-len(old)))...)
	copy(next[base:], data)
	s.model[s.sharedPath] = next
}

// smallWrites writes a burst of small pieces (up to 4 KiB) at random
// places in a file through one handle, now and then punching a hole of
// up to 600 KiB (several stripes of every simulated layout), then closes
// it.
func (s *sim) smallWrites() {
	p, ok := s.pickFile()
	if !ok {
		return
	}
	next := append([]byte(nil), s.model[p]...)
	k := 5 + s.rng.IntN(40)
	punches := 0
	err := s.withWriter(p, func(f *braid.File) error {
		for j := 0; j < k; j++ {
			if s.rng.IntN(8) == 0 && len(next) > 0 {
				off, n := s.rng.IntN(len(next)), 1+s.rng.IntN(600<<10)
				if err := f.PunchHole(int64(off), int64(n)); err != nil {
					return err
				}
				clear(next[off:min(off+n, len(next))])
				punches++
				continue
			}
			off := s.rng.IntN(len(next) + 4096)
			data := randBytes(s.rng, 1+s.rng.IntN(4096))
			if _, err := f.WriteAt(data, int64(off)); err != nil {
				return err
			}
			next = append(next, make([]byte, max(0, off+len(data)-len(next)))...)
			copy(next[off:], data)
		}
		return nil
	})
	s.logf("small writes %s: %d, %d of them punches: %v", p, k, punches, err)
	if err != nil {
		s.fatalf("small writes %s: %v", p, err)
	}
	s.model[p] = next
}
