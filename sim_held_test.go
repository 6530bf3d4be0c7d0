package braid_test

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/braidfs/braid"
)

// The simulation's held files: kept open for writing across steps, synced
// and closed at random, and checked through second handles.

// heldPaths are the names of the files kept open across steps; the other
// operations never touch them.
var heldPaths = []string{"/h0", "/h1"}

// heldStep opens one of the held files, writes through it, syncs it or
// closes it. A closed held file joins the model of acknowledged files.
func (s *sim) heldStep() {
	p := s.heldPaths[s.rng.IntN(len(s.heldPaths))]
	h := s.held[p]
	if h == nil {
		if old, ok := s.model[p]; ok {
			f, err := s.client().OpenFile(ctx, p, true)
			s.logf("hold %s again: %v", p, err)
			if err != nil {
				s.fatalf("open %s: %v", p, err)
			}
			s.held[p] = &heldFile{f: f, acked: old, now: slices.Clone(old)}
			delete(s.model, p)
			return
		}
		spec := simLayouts[s.rng.IntN(len(simLayouts))]
		f, err := s.client().Create(ctx, p, braid.CreateOptions{Layout: spec, SizeHint: -1})
		s.logf("hold %s %q: %v", p, spec, err)
		if err != nil {
			s.fatalf("create %s: %v", p, err)
		}
		s.held[p] = &heldFile{f: f}
		return
	}
	switch s.rng.IntN(4) {
	case 0, 1:
		off := s.rng.IntN(len(h.now) + 64<<10)
		data := randBytes(s.rng, 1+s.rng.IntN(150<<10))
		_, err := h.f.WriteAt(data, int64(off))
		s.logf("held write %s at %d, %d bytes: %v", p, off, len(data), err)
		if err != nil {
			s.fatalf("held write %s: %v", p, err)
		}
		h.now = append(h.now, make([]byte, max(0, off+len(data)-len(h.now)))...)
		copy(h.now[off:], data)
	case 2:
		s.syncHeldFile(p)
	case 3:
		s.closeHeldFile(p)
	}
}

// syncHeldFile syncs held file p: what it wrote is acknowledged, and
// read back through a second handle.
func (s *sim) syncHeldFile(p string) {
	h := s.held[p]
	err := h.f.Sync()
	s.logf("held sync %s: %v", p, err)
	if err != nil {
		s.fatalf("held sync %s: %v", p, err)
	}
	h.acked = slices.Clone(h.now)
	s.verifyHeld(p, "after its sync")
}

// closeHeldFile closes held file p; what it wrote joins the model.
func (s *sim) closeHeldFile(p string) {
	h := s.held[p]
	err := h.f.Close()
	s.logf("held close %s: %v", p, err)
	if err != nil {
		s.fatalf("held close %s: %v", p, err)
	}
	delete(s.held, p)
	s.model[p] = h.now
}

// verifyHeld reads an open file through a second handle: once synced,
// what was written through the held handle is acknowledged.
func (s *sim) verifyHeld(p, what string) {
	got, err := get(s.t, s.client(), p)
	if err != nil {
		s.fatalf("%s: read %s: %v", what, p, err)
	}
	if !bytes.Equal(got, s.held[p].acked) {
		s.fatalf("%s: %s reads %d bytes differing from the %d acknowledged (%s)", what, p, len(got), len(s.held[p].acked), s.describe(p, got, s.held[p].acked))
	}
}

// isHeld reports whether the object file obj belongs to a held file.
func (s *sim) isHeld(obj string) bool {
	for _, h := range s.held {
		if strings.HasPrefix(path.Base(obj), fmt.Sprintf("%016x.", h.f.Ino())) {
			return true
		}
	}
	return false
}

// closeHeld closes every held file (at the end of a run).
func (s *sim) closeHeld() {
	for _, p := range s.heldPaths {
		if s.held[p] != nil {
			s.closeHeldFile(p)
		}
	}
}

// fault injects one fault, lets the cluster live with it for a moment of
// simulated time (with a read of every file), then undoes it and waits
// until the cluster is healthy again.
