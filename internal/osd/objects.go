package osd

import (
	"cmp"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/braidfs/braid/internal/wire"
)

// The open objects: the cache of handles, opening, creating and the
// file store's checksum header. (The store's format is doc.go's.)

// acquire returns the open object for k, opening it from disk, or creating
// it when create is set. It returns (nil, nil) for a missing object that is
// not to be created.
func (s *Store) acquire(k ObjKey, create bool, version uint64) (*object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clock++
	if o := s.open[k]; o != nil && !s.goneLocked(o) {
		o.refs++
		o.lastUse = s.clock
		return o, nil
	}
	o, err := s.openObject(k, create, version)
	if o == nil || err != nil {
		return nil, err
	}
	o.refs, o.lastUse = 1, s.clock
	s.open[k] = o
	s.evictLocked()
	return o, nil
}

func (s *Store) release(o *object) {
	s.mu.Lock()
	o.refs--
	if o.dropped && o.refs == 0 {
		o.closeFiles()
	}
	s.evictLocked()
	s.mu.Unlock()
}

// goneLocked reports whether idle object o's files were removed from disk
// under the store (an operator, a restored backup, fsck): an open
// descriptor would go on serving them until a restart, and nothing would
// notice the loss. It looks at most every revalidateAfter per object, and
// drops o when its files are gone, so the caller opens the key afresh
// (and finds it missing); requests already holding o finish with it.
func (s *Store) goneLocked(o *object) bool {
	if o.packed {
		// Only an idle one: a request holding it (a promotion between
		// the pack's delete and its files) must not find a second
		// object of the same key beside it.
		if o.refs > 0 || !o.stored.Load() || s.packed(o.key) {
			return false
		}
		delete(s.open, o.key) // gone from the pack under the store: opened afresh, missing
		o.dropped = true
		return true
	}
	now := s.now()
	if now.Sub(o.checked) < revalidateAfter {
		return false
	}
	o.checked = now
	if linked(o.data) && linked(o.sum) {
		return false
	}
	// Requests under way finish with the old files; the last closes them.
	delete(s.open, o.key)
	o.dropped = true
	if o.refs == 0 {
		o.closeFiles()
	}
	return true
}

// revalidateAfter is how often an idle cached object's files are checked
// for removal from under the store.
const revalidateAfter = time.Second

// linked reports whether f still has a name on disk (as far as its
// FileInfo tells: a file system that does not say is taken at its word).
func linked(f File) bool {
	fi, err := f.Stat()
	if err != nil {
		return true // a failing disk is found by the read that follows
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Nlink > 0
}

// evictLocked closes least recently used idle objects past the limit:
// down to evictToObjects at once, so the scan of every open object is
// paid once per many opens, not at each.
func (s *Store) evictLocked() {
	if len(s.open) <= maxOpenObjects {
		return
	}
	idle := make([]*object, 0, len(s.open))
	for _, o := range s.open {
		if o.refs == 0 {
			idle = append(idle, o)
		}
	}
	// every handle in use: the limit is soft under load
	slices.SortFunc(idle, func(a, b *object) int { return cmp.Compare(a.lastUse, b.lastUse) })
	for _, victim := range idle[:min(len(idle), len(s.open)-evictToObjects)] {
		delete(s.open, victim.key)
		victim.closeFiles()
	}
}

// evictToObjects is how many open objects an eviction leaves.
const evictToObjects = maxOpenObjects * 7 / 8

func (s *Store) openObject(k ObjKey, create bool, version uint64) (*object, error) {
	if e, ok := s.pack.lookup(k); ok {
		o := &object{key: k, packed: true, size: e.size, version: e.version, lastSeq: e.last, format: sumFormat}
		o.stored.Store(true)
		return o, nil
	}
	dataPath, sumPath := s.path(k, "dat"), s.path(k, "sum")
	sum, err := s.fs.OpenFile(sumPath, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil, nil
		}
		return s.createObject(k, version)
	}
	if err != nil {
		return nil, err
	}
	data, err := s.fs.OpenFile(dataPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		_ = sum.Close()
		return nil, err
	}
	o := &object{key: k, data: data, sum: sum}
	if err := o.loadHeader(); err != nil {
		_ = data.Close()
		_ = sum.Close()
		return nil, err
	}
	fi, err := data.Stat()
	if err != nil {
		_ = data.Close()
		_ = sum.Close()
		return nil, err
	}
	o.size = fi.Size()
	return o, nil
}

func (s *Store) createObject(k ObjKey, version uint64) (*object, error) {
	if s.packing {
		// Nothing on disk until its first image.
		return &object{key: k, packed: true, version: version, format: sumFormat, fresh: true}, nil
	}
	if err := s.fs.MkdirAll(filepath.Dir(s.path(k, "sum")), 0o700); err != nil {
		return nil, err
	}
	data, err := s.fs.OpenFile(s.path(k, "dat"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	sum, err := s.fs.OpenFile(s.path(k, "sum"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		_ = data.Close()
		return nil, err
	}
	o := &object{key: k, data: data, sum: sum, version: version, format: sumFormat, sumBase: sumHeaderBytes + sumLabelBytes, fresh: true}
	if err := o.writeHeader(); err != nil {
		_ = data.Close()
		_ = sum.Close()
		_ = s.fs.Remove(s.path(k, "sum"))
		return nil, err
	}
	return o, nil
}

func (o *object) writeHeader() error {
	var h [sumHeaderBytes]byte
	binary.LittleEndian.PutUint32(h[0:], sumMagic)
	binary.LittleEndian.PutUint16(h[4:], o.format)
	binary.LittleEndian.PutUint64(h[8:], o.key.Ino)
	binary.LittleEndian.PutUint32(h[16:], o.key.Comp)
	binary.LittleEndian.PutUint64(h[24:], o.version)
	binary.LittleEndian.PutUint32(h[60:], wire.CRC(h[:60]))
	_, err := o.sum.WriteAt(h[:], 0)
	return err
}

func (o *object) loadHeader() error {
	var h [sumHeaderBytes]byte
	if _, err := o.sum.ReadAt(h[:], 0); err != nil {
		return wire.Errorf(wire.ErrLost, "object %x.%d: checksum header unreadable: %v", o.key.Ino, o.key.Comp, err)
	}
	o.format = binary.LittleEndian.Uint16(h[4:])
	if binary.LittleEndian.Uint32(h[0:]) != sumMagic || (o.format != 1 && o.format != 2) ||
		binary.LittleEndian.Uint32(h[60:]) != wire.CRC(h[:60]) {
		return wire.Errorf(wire.ErrLost, "object %x.%d: checksum header damaged", o.key.Ino, o.key.Comp)
	}
	o.sumBase = sumHeaderBytes
	if o.format == 2 {
		o.sumBase += sumLabelBytes
	}
	if binary.LittleEndian.Uint64(h[8:]) != o.key.Ino || binary.LittleEndian.Uint32(h[16:]) != o.key.Comp {
		return wire.Errorf(wire.ErrLost, "object %x.%d: back-pointer names another object", o.key.Ino, o.key.Comp)
	}
	o.version = binary.LittleEndian.Uint64(h[24:])
	return nil
}
