package osd

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// Compaction: a sealed segment at most half live has its live records
// copied to the end of the log, everything appended made durable, and
// the segment is then removed (the most dead first). A delete is copied
// too while a segment that may hold an older record of its object
// remains (its killed segment or one before it) and no later image of
// the object exists (an image ends everything before it); otherwise it
// has nothing left to hide and is dropped. An image is copied with its
// label after it, as put writes them. A
// copy is appended under the pack's lock only if the index still points
// at the original, so a write racing with compaction always lands after
// the copy and wins, also when the log is read again after a crash.

// Compact runs one compaction step: it reports whether it removed a
// segment.
func (s *Store) Compact() (bool, error) {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	return s.pack.compactOne()
}

// victim is the sealed segment with the fewest live bytes among those at
// most half live, or nil.
func (p *pack) victim() *segment {
	p.mu.Lock()
	defer p.mu.Unlock()
	var v *segment
	for _, sg := range p.segs {
		if sg == p.active || sg.size == 0 || 2*sg.live > sg.size {
			continue
		}
		if v == nil || sg.live < v.live {
			v = sg
		}
	}
	return v
}

func (p *pack) compactOne() (bool, error) {
	v := p.victim()
	if v == nil {
		return false, nil
	}
	b := make([]byte, v.size) // sealed: its size is fixed
	if n, err := v.f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return false, fmt.Errorf("read pack segment %s: %w", segName(v.seq, v.salt), err)
	}
	recs, _ := scanSegment(v.salt, b)
	for _, r := range recs {
		if r.damaged || r.h.kind == recSynced {
			continue
		}
		if err := p.copyForward(v, r, b[r.off:r.off+recBytes(int(r.h.bodyLen))]); err != nil {
			return false, err
		}
	}
	if err := p.forgetIn(v); err != nil {
		return false, err
	}
	// Everything appended so far is made durable, not only the copies:
	// a record of v that a later one superseded may be the last durable
	// state of its object until that later one is synced. Then once more,
	// so the synced mark that sync appended is durable too: v may hold
	// the newest mark, and an open without it would take rot for torn
	// writes.
	for range 2 {
		p.mu.Lock()
		last := p.written
		p.mu.Unlock()
		if err := p.waitDurable(last); err != nil {
			return false, err
		}
	}
	return true, p.removeSegment(v)
}

// copyForward appends record r of segment v again if it is still needed,
// and points the index at the copy.
func (p *pack) copyForward(v *segment, r scannedRecord, raw []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := recLoc{seg: v.seq, off: r.off, n: int64(len(raw))}
	e := p.index[r.h.key]
	switch r.h.kind {
	case recImage:
		if e == nil || e.img != at {
			return nil
		}
	case recLabel:
		if e == nil || e.label != at {
			return nil
		}
	case recDelete:
		// Its incarnation is told apart by birth, so a copy that lands
		// after a newer incarnation's image does not end that one.
		if !p.holdsOlder(r.h.killed, v.seq) {
			return nil
		}
	}
	loc, _, err := p.appendRecord(int64(len(raw)), func(salt uint64) []byte { return resalt(salt, raw) })
	if err != nil {
		return err
	}
	p.apply(r.h, loc, r.body, 0)
	return nil
}

// holdsOlder reports whether a segment other than except, up to killed,
// remains (mu held): it may hold an older record a delete hides.
func (p *pack) holdsOlder(killed, except uint64) bool {
	for seq := range p.segs {
		if seq != except && seq <= killed {
			return true
		}
	}
	return false
}

// forgetIn makes objects whose latest image is still in segment v (its
// record no longer checks: damaged since the pack was opened) missing,
// and drops labels left there, before v is removed.
func (p *pack) forgetIn(v *segment) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.index {
		if e.label.seg == v.seq && e.label.n > 0 {
			p.dead(e.label)
			e.label = recLoc{}
		}
		if e.img.seg == v.seq {
			if _, err := p.appendDelete(k, e.birth, max(v.seq, e.label.seg)); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeSegment removes sealed segment v, whose live records were copied
// and made durable, and makes the removal durable: a delete dropped
// because v was gone must not meet v's records again after a crash.
func (p *pack) removeSegment(v *segment) error {
	p.rmu.Lock()
	p.mu.Lock()
	delete(p.segs, v.seq)
	p.mu.Unlock()
	_ = v.f.Close()
	err := p.fs.Remove(filepath.Join(p.dir, segName(v.seq, v.salt)))
	p.rmu.Unlock()
	if err != nil {
		return err
	}
	if fatal, err := syncDirOn(p.fs, p.dir); err != nil {
		if fatal {
			p.onFatal(fmt.Errorf("fsync directory %s: %w", p.dir, err))
		}
		return err
	}
	return nil
}
