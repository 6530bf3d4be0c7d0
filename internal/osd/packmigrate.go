package osd

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// Migrate moves small objects of a store written before the pack into it,
// up to limit of them (files a move that a crash cut short left behind
// are removed at open, before any request). It reports how many it
// moved and whether objects to move remain. An object is moved under its lock:
// its image and label are appended and made durable, then its files
// removed and their directory synced.
func (s *Store) Migrate(limit int) (moved int, more bool, err error) {
	root := filepath.Join(s.dir, "objects")
	subdirs, err := s.fs.ReadDir(root)
	if err != nil {
		return 0, false, err
	}
	for _, sd := range subdirs {
		dir := filepath.Join(root, sd.Name())
		entries, err := s.fs.ReadDir(dir)
		if err != nil {
			continue
		}
		touched := false
		for _, e := range entries {
			k, ok := ParseObjectName(e.Name())
			if !ok {
				continue
			}
			fi, err := e.Info()
			if err != nil || fi.Size() > packMaxBytes {
				continue
			}
			if moved >= limit {
				return moved, true, nil
			}
			did, err := s.migrate(k)
			if err != nil {
				return moved, true, err
			}
			if did {
				moved++
				touched = true
			}
		}
		if touched {
			if err := s.syncDir(dir); err != nil {
				return moved, true, err
			}
		}
	}
	return moved, false, nil
}

// migrate moves file object k into the pack, or removes its files if the
// pack holds it already. It reports whether it removed files.
func (s *Store) migrate(k ObjKey) (bool, error) {
	if s.packed(k) {
		return false, nil // leftovers of a move are removed at open (scanUsed); a move under way is promote's
	}
	o, err := s.acquire(k, false, 0)
	if err != nil || o == nil {
		return false, nil // damaged (a scrub finds it) or gone
	}
	defer s.release(o)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.deleted || o.packed || o.size > packMaxBytes {
		return false, nil
	}
	im := &image{version: o.version, data: make([]byte, o.size)}
	if err := s.readLocked(o, 0, im.data); err != nil {
		return false, nil // a block that does not check stays for the scrub to see
	}
	im.sums = make([]uint32, (o.size+blockBytes-1)/blockBytes)
	raw := make([]byte, 4*len(im.sums))
	if n, err := o.sum.ReadAt(raw, o.sumBase); err != nil && !errors.Is(err, io.EOF) {
		return false, s.ioError(err)
	} else {
		clear(raw[n:])
	}
	for i := range im.sums {
		im.sums[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	label := s.labelLocked(o)
	seq, err := s.pack.put(k, im)
	if err == nil && len(label) > 0 {
		seq, err = s.pack.putLabel(k, label)
	}
	if err == nil {
		err = s.pack.waitDurable(seq)
	}
	if err != nil {
		return false, s.ioError(err)
	}
	s.mu.Lock() // goneLocked and eviction look at an object's files under the store's lock
	o.closeFiles()
	o.packed, o.data, o.sum, o.lastSeq = true, nil, nil, seq
	o.stored.Store(true)
	s.mu.Unlock()
	return true, s.removeObjectFiles(k)
}

// removeObjectFiles removes k's data and sum files (not its stages: they
// are the object's wherever it lives); the caller syncs the directory.
func (s *Store) removeObjectFiles(k ObjKey) error {
	for _, ext := range []string{"dat", "sum"} {
		if err := s.fs.Remove(s.path(k, ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return s.ioError(err)
		}
	}
	return nil
}
