package osd

import (
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"sort"

	"github.com/braidfs/braid/internal/wire"
)

// Labels (Swift's scavenging). Each object's sum file keeps, after the
// fixed header, a label the MDS writes: which file the object belongs to,
// its path, layout and size (an mdsproto.ObjectLabel, opaque here). If the MDS's
// store is lost, `braid recover-metadata` reads every OSD's labels and
// rebuilds the namespace from them.
//
// Label area (format 2 sum files, bytes 64..4095): len u32, crc u32
// (CRC32C of the label), then len bytes.

// SetLabel records label on object k. A missing object gets none (it has
// no data to describe); an object of a newer layout keeps its own.
func (s *Store) SetLabel(k ObjKey, version uint64, label []byte) error {
	if len(label) > maxLabelBytes {
		return wire.Errorf(wire.ErrBadRequest, "label of %d bytes exceeds %d", len(label), maxLabelBytes)
	}
	o, done, err := s.lockObject(k, version, forSync)
	if err != nil || o == nil {
		return err
	}
	defer done()
	if o.packed {
		seq, err := s.pack.putLabel(k, label) // none for an object not written yet
		if err != nil {
			return s.ioError(err)
		}
		o.lastSeq = max(o.lastSeq, seq)
		return nil
	}
	if o.format < 2 {
		return nil // made before labels existed
	}
	if err := o.writeLabel(label); err != nil {
		return s.ioError(err)
	}
	return nil
}

// writeLabel writes label into the label area of o's sum file.
func (o *object) writeLabel(label []byte) error {
	b := make([]byte, 8+len(label))
	binary.LittleEndian.PutUint32(b[0:], uint32(len(label)))
	binary.LittleEndian.PutUint32(b[4:], wire.CRC(label))
	copy(b[8:], label)
	_, err := o.sum.WriteAt(b, sumHeaderBytes)
	return err
}

func (s *Store) labelLocked(o *object) []byte {
	if o.packed {
		return s.pack.readLabel(o.key)
	}
	if o.format < 2 {
		return nil
	}
	var h [8]byte
	if _, err := o.sum.ReadAt(h[:], sumHeaderBytes); err != nil {
		return nil
	}
	n := binary.LittleEndian.Uint32(h[0:])
	if n == 0 || n > maxLabelBytes {
		return nil
	}
	b := make([]byte, n)
	if _, err := o.sum.ReadAt(b, sumHeaderBytes+8); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	if wire.CRC(b) != binary.LittleEndian.Uint32(h[4:]) {
		return nil // a damaged label is no label
	}
	return b
}

// LabelEntry is one object as a scan reports it.
type LabelEntry struct {
	Key     ObjKey
	Version uint64
	Len     int64
	Label   []byte // nil if the object has none
	Cursor  string // resume a scan after this entry
}

// ScanLabels lists objects in a fixed order (by directory, then name)
// starting after cursor, up to limit of them, and returns where to go on
// ("" when done).
func (s *Store) ScanLabels(cursor string, limit int) ([]LabelEntry, string, error) {
	root := filepath.Join(s.dir, "objects")
	subdirs, err := s.fs.ReadDir(root)
	if err != nil {
		return nil, "", s.ioError(err)
	}
	var names []string
	for _, sd := range subdirs {
		entries, err := s.fs.ReadDir(filepath.Join(root, sd.Name()))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if k, ok := ParseObjectName(e.Name()); ok && !s.packed(k) {
				names = append(names, sd.Name()+"/"+e.Name())
			}
		}
	}
	for _, k := range s.pack.keys() {
		names = append(names, filepath.Join(filepath.Base(filepath.Dir(s.path(k, "dat"))), filepath.Base(s.path(k, "dat"))))
	}
	sort.Strings(names)
	i := sort.SearchStrings(names, cursor)
	if i < len(names) && names[i] == cursor {
		i++
	}
	var out []LabelEntry
	for ; i < len(names) && len(out) < limit; i++ {
		k, _ := ParseObjectName(filepath.Base(names[i]))
		o, err := s.acquire(k, false, 0)
		if err != nil || o == nil {
			continue // damaged or gone: nothing to recover from it
		}
		o.mu.RLock()
		if !o.deleted {
			out = append(out, LabelEntry{Key: k, Version: o.version, Len: o.size, Label: s.labelLocked(o), Cursor: names[i]})
		}
		o.mu.RUnlock()
		s.release(o)
	}
	if i >= len(names) {
		return out, "", nil
	}
	return out, names[i-1], nil
}
