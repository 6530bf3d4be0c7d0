package osd

import (
	"errors"
	"io/fs"
	"path/filepath"

	"github.com/braidfs/braid/internal/wire"
)

// Deletion of objects, durable on return.

// Delete removes object k if it was written under layout version
// `version` or earlier (DeleteComps).
func (s *Store) Delete(k ObjKey, version uint64) error {
	return s.DeleteComps(k.Ino, []uint32{k.Comp}, version)
}

// DeleteComps removes the objects of components comps of file ino that
// were written under layout version `version` or earlier; an object a
// newer layout has written belongs to that layout and stays. A missing
// object is not an error. The removals are durable on return (one fsync
// of the file's object directory): a deletion the MDS was told of must
// not be undone by a power cut, or the object would come back held by no
// file, for good. It stops at the first failure.
func (s *Store) DeleteComps(ino uint64, comps []uint32, version uint64) error {
	removed := false
	var packSeq uint64
	var err error
	for _, c := range comps {
		var r bool
		var seq uint64
		if r, seq, err = s.deleteObject(ObjKey{Ino: ino, Comp: c}, version); err != nil {
			break
		}
		removed = removed || r
		packSeq = max(packSeq, seq)
	}
	if removed {
		if serr := s.syncDir(filepath.Dir(s.path(ObjKey{Ino: ino}, "dat"))); err == nil {
			err = serr
		}
	}
	if packSeq > 0 {
		if serr := s.pack.waitDurable(packSeq); err == nil && serr != nil {
			err = s.ioError(serr)
		}
	}
	return err
}

// deleteObject removes object k's files or its image (not yet durably)
// and reports whether there were files, and the pack append to wait for.
// They are removed while the object is locked and still cached, so a
// concurrent request either finishes first or finds it deleted; none
// can reopen the files half-way.
func (s *Store) deleteObject(k ObjKey, version uint64) (removed bool, packSeq uint64, err error) {
	o, err := s.acquire(k, false, 0)
	if err != nil && !errors.Is(err, wire.ErrLost) {
		return false, 0, s.ioError(err)
	}
	if o == nil {
		removed, err := s.removeFiles(k) // absent, or its header unreadable: nothing to keep
		return removed, 0, err
	}
	o.mu.Lock()
	err = nil
	switch {
	case o.deleted:
	case o.version > version:
		err = wire.Errorf(wire.ErrStale, "object %x.%d belongs to layout version %d", k.Ino, k.Comp, o.version)
	case o.packed:
		s.dropStagesOf(k)
		if packSeq, err = s.pack.remove(k); err != nil {
			err = s.ioError(err)
		} else {
			o.deleted = true
			s.usedBytes.Add(-o.size)
		}
	default:
		if removed, err = s.removeFiles(k); err == nil {
			o.deleted = true
			s.usedBytes.Add(-o.size)
			o.closeFiles()
		}
	}
	o.mu.Unlock()
	s.mu.Lock()
	o.refs--
	if o.deleted && s.open[k] == o {
		delete(s.open, k)
	}
	s.mu.Unlock()
	return removed, packSeq, err
}

// removeFiles removes k's files and stages, reporting whether any of
// its files existed; the caller makes the removal durable.
func (s *Store) removeFiles(k ObjKey) (bool, error) {
	s.dropStagesOf(k)
	removed := false
	for _, ext := range []string{"dat", "sum"} {
		err := s.fs.Remove(s.path(k, ext))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, s.ioError(err)
		}
		removed = removed || err == nil
	}
	return removed, nil
}

// errDeleted is returned to requests that raced with a delete.
func errDeleted(k ObjKey) error {
	return wire.Errorf(wire.ErrNotFound, "object %x.%d was deleted", k.Ino, k.Comp)
}
