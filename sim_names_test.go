package braid_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"

	"github.com/braidfs/braid"
)

// simNames is the write-back client of the simulation (writeback.go): it
// claims the directories it makes and creates and unlinks empty files in
// them from memory, under whatever faults the other steps bring (MDS
// restarts, cut connections, conflicting transactions). Another client's
// listing must show exactly what it acknowledged: nothing lost, nothing
// removed come back.
type simNames struct {
	cl    *braid.Client
	dir   braid.Attr
	names map[string]bool // what the directory holds, as acknowledged
	made  int             // directories made so far
	// unsure names a sync op (not write-back) whose outcome an error
	// left unknown: the listing decides it.
	unsure map[string]bool
}

// namesWorkload runs a few creates and unlinks through the write-back
// client and, now and then, checks the directory from another client
// and starts a new one. With several MDS processes no claim is granted
// (their caches are off), so it runs with one.
func (s *sim) namesWorkload() {
	if s.mdsCount > 1 {
		return
	}
	saved, saved2 := s.rng, s.rng2
	s.rng, s.rng2 = rand.New(rand.NewPCG(s.rng6.Uint64(), 1)), rand.New(rand.NewPCG(s.rng6.Uint64(), 2))
	defer func() { s.rng, s.rng2 = saved, saved2 }()
	if s.names == nil {
		cl := s.c.DialWith(func(o *braid.Options) { o.WriteBackNames = true })
		cl.CacheMetadata(nil)
		s.names = &simNames{cl: cl}
	}
	w := s.names
	if w.dir.Ino == 0 || s.rng.IntN(4) == 0 {
		s.checkNames("before a new directory")
		w.made++
		p := fmt.Sprintf("wb%d", w.made)
		d, err := w.cl.MkdirAt(wbCtx, braid.RootIno, p, 0o755, 0, 0)
		if err != nil {
			s.infof("names: mkdir %s: %v", p, err)
			w.dir = braid.Attr{}
			return
		}
		w.dir, w.names, w.unsure = d, map[string]bool{}, map[string]bool{}
		s.logf("names: mkdir %s", p)
	}
	for range 1 + s.rng.IntN(24) {
		name := fmt.Sprintf("n%d", s.rng.IntN(30))
		if s.rng.IntN(3) > 0 {
			s.namesCreate(name)
		} else {
			s.namesRemove(name)
		}
	}
}

var wbCtx = braid.WithCaller(ctx, braid.Caller{})

func (s *sim) namesCreate(name string) {
	w := s.names
	_, deferred, err := w.cl.CreateDeferredAt(wbCtx, w.dir.Ino, name, braid.CreateOptions{Mode: 0o600, Exclusive: true})
	if deferred || (err != nil && !w.unsure[name]) {
		// Answered from the claim: exactly as the model says.
		if exists := w.names[name]; exists != errors.Is(err, braid.ErrExists) || (err != nil && !exists) {
			s.fatalf("names: write-back create %s in %d: %v, the model has it: %v", name, w.dir.Ino, err, exists)
		}
		w.names[name] = true
		return
	}
	if err != nil {
		return
	}
	f, err := w.cl.CreateAt(wbCtx, w.dir.Ino, name, braid.CreateOptions{Mode: 0o600, SizeHint: -1, Exclusive: true})
	if err == nil {
		err = f.Close()
	}
	s.namesSync(name, err, true)
}

func (s *sim) namesRemove(name string) {
	w := s.names
	err := w.cl.RemoveAt(wbCtx, w.dir.Ino, name, false)
	s.namesSync(name, err, false)
}

// namesSync notes the outcome of a create or unlink: a success or a
// clear refusal is known; any other error leaves the name unsure.
func (s *sim) namesSync(name string, err error, create bool) {
	w := s.names
	switch {
	case err == nil:
		w.names[name] = create
		delete(w.unsure, name)
	case errors.Is(err, braid.ErrExists) && create, errors.Is(err, braid.ErrNotFound) && !create:
		if !w.unsure[name] && w.names[name] != create {
			s.fatalf("names: %s in %d: %v, the model has it: %v", name, w.dir.Ino, err, w.names[name])
		}
		w.names[name] = create
		delete(w.unsure, name)
	default:
		s.infof("names: %s in %d: %v", name, w.dir.Ino, err)
		w.unsure[name] = true
	}
	if !w.names[name] {
		delete(w.names, name)
	}
}

// checkNames lists the write-back client's directory from another
// client (which recalls the claim) and compares it with the model.
func (s *sim) checkNames(what string) {
	w := s.names
	if w == nil || w.dir.Ino == 0 {
		return
	}
	if err := w.cl.SyncNames(wbCtx); err != nil {
		s.fatalf("names %s: the write-back client reports: %v", what, err)
	}
	entries, more, err := s.cl.ReadDirAt(ctx, w.dir.Ino, "", 1000)
	if err != nil || more {
		s.fatalf("names %s: list %d: more %v, %v", what, w.dir.Ino, more, err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		got[e.Name] = true
	}
	for name := range w.unsure {
		w.names[name] = got[name]
		if !got[name] {
			delete(w.names, name)
		}
	}
	clear(w.unsure)
	if !maps.Equal(got, w.names) {
		s.fatalf("names %s: directory %d lists %v, acknowledged %v", what, w.dir.Ino,
			slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(w.names)))
	}
	s.logf("names %s: %d names as acknowledged", what, len(got))
}

// removeNames removes every name the write-back client's directories
// hold (the final checks count the objects left once every file is
// removed).
func (s *sim) removeNames() {
	if s.names == nil {
		return
	}
	for i := 1; i <= s.names.made; i++ {
		d := fmt.Sprintf("/wb%d", i)
		infos, err := s.cl.ReadDir(ctx, d)
		if errors.Is(err, braid.ErrNotFound) {
			continue
		}
		if err != nil {
			s.fatalf("names: list %s: %v", d, err)
		}
		for _, fi := range infos {
			if err := s.cl.Remove(ctx, d+"/"+fi.Name); err != nil {
				s.fatalf("names: remove %s/%s: %v", d, fi.Name, err)
			}
		}
	}
}
