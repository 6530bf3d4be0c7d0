package osd

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/braidfs/braid/internal/wire"
)

// The pack holds small objects (up to packMaxBytes) in a log, as Ceph's
// BlueStore defers small writes into its RocksDB log and SeaweedFS packs
// small files into volumes: a new 4 KiB object costs one append to the
// active segment, and its sync shares one fsync with every other request
// waiting at the time (group commit), where the file store costs two
// files, a directory entry and three fsyncs. Records are checksummed and
// never changed in place (packfmt.go); the latest record of an object
// wins. An in-memory index maps each object to its records; it is rebuilt
// at open by reading every segment (a torn tail is cut off, a damaged
// record skipped and its object made missing, so it is rebuilt from its
// redundancy, never read as an older state). Compaction (packcompact.go)
// copies the live records of segments mostly dead forward and removes
// them. Objects that grow past packMaxBytes move to their own files.
type pack struct {
	fs       FS
	dir      string
	onFatal  func(error)
	segBytes int64 // a segment is sealed past this many bytes

	// rmu is held for reading while a record is read, for writing while
	// a segment is removed: a reader never finds its segment gone.
	rmu     sync.RWMutex
	mu      sync.Mutex // appends, the index and the segment table
	index   map[ObjKey]*packEntry
	segs    map[uint64]*segment // every segment on disk
	active  *segment
	written uint64 // appends so far (their sequence numbers)
	newDirs bool   // a segment was created or removed since the directory was synced

	smu     sync.Mutex
	scond   sync.Cond
	syncing bool   // a group sync is running
	durable uint64 // appends up to this one are durable
}

// segment is one log file.
type segment struct {
	seq   uint64
	f     File
	size  int64 // bytes appended
	live  int64 // bytes of its records that are the latest of their object
	dirty bool  // appended since its last fsync
}

// packEntry is where an object's latest records are.
type packEntry struct {
	img     recLoc // its image
	label   recLoc // its label, if any (n == 0: none)
	size    int64
	version uint64
	last    uint64 // sequence number of its latest append
}

// recLoc is a record: segment, offset and length.
type recLoc struct {
	seg uint64
	off int64
	n   int64
}

// packMaxBytes: objects up to this size are packed; larger ones have
// their own files. Slice's threshold for small-file servers.
const packMaxBytes = 64 << 10

// packSegmentBytes: a segment is sealed past this size.
const packSegmentBytes = 64 << 20

// maxSegmentFileBytes bounds what is read of one segment at open: a
// segment holds at most one record past packSegmentBytes.
const maxSegmentFileBytes = 4 * packSegmentBytes

func segName(seq uint64) string { return fmt.Sprintf("%016x.log", seq) }

// openPack opens (creating) the pack in dir and reads its index.
func openPack(fsys FS, dir string, segBytes int64, onFatal func(error)) (*pack, error) {
	p := &pack{fs: fsys, dir: dir, onFatal: onFatal, segBytes: segBytes, index: map[ObjKey]*packEntry{}, segs: map[uint64]*segment{}}
	p.scond.L = &p.smu
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".log")
		if seq, err := strconv.ParseUint(name, 16, 64); ok && err == nil && len(name) == 16 {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	var damaged []damage
	for i, seq := range seqs {
		d, err := p.load(seq, i == len(seqs)-1)
		if err != nil {
			p.close()
			return nil, err
		}
		damaged = append(damaged, d...)
	}
	if err := p.forget(damaged); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// damage is a record found damaged at open: its object and place.
type damage struct {
	key ObjKey
	at  recLoc
}

// load reads segment seq into the index. The last segment's torn tail is
// cut off.
func (p *pack) load(seq uint64, last bool) ([]damage, error) {
	path := filepath.Join(p.dir, segName(seq))
	f, err := p.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if fi.Size() > maxSegmentFileBytes {
		_ = f.Close()
		return nil, fmt.Errorf("pack segment %s holds %d bytes: not a segment", path, fi.Size())
	}
	b := make([]byte, fi.Size())
	if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		_ = f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	recs, end := scanSegment(b)
	sg := &segment{seq: seq, f: f, size: int64(len(b))}
	if last && end < sg.size {
		// Appended since the last fsync and torn by a crash: never acknowledged as durable.
		if err := f.Truncate(end); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("cut the torn tail of %s: %w", path, err)
		}
		sg.size = end
	}
	p.segs[seq] = sg
	p.active = sg
	var damaged []damage
	for _, r := range recs {
		if r.damaged {
			damaged = append(damaged, damage{key: r.h.key, at: recLoc{seg: seq, off: r.off}})
			p.drop(r.h.key)
			continue
		}
		p.apply(r.h, recLoc{seg: seq, off: r.off, n: recBytes(int(r.h.bodyLen))}, r.body, 0)
	}
	return damaged, nil
}

// forget makes objects whose latest record was damaged missing, durably:
// a read must not find an older state of them, and their redundancy
// rebuilds them. An object written again after the damage keeps that.
func (p *pack) forget(damaged []damage) error {
	var last uint64
	for _, d := range damaged {
		if e := p.index[d.key]; e != nil && before(d.at, e.img) {
			continue
		}
		// Any segment may hold a label of it: the delete outlives them all.
		seq, err := p.appendDelete(d.key, p.active.seq)
		if err != nil {
			return err
		}
		last = seq
	}
	if last > 0 {
		return p.waitDurable(last)
	}
	return nil
}

// apply records in the index that record h at loc is now the latest of
// its kind for its object (mu held, or opening).
func (p *pack) apply(h recHeader, loc recLoc, body []byte, seq uint64) {
	e := p.index[h.key]
	switch h.kind {
	case recImage:
		// An image is the object's whole state: a label follows it
		// (put and compaction write the label again after each image).
		if e == nil {
			e = &packEntry{}
			p.index[h.key] = e
		} else {
			p.dead(e.img)
			p.dead(e.label)
			e.label = recLoc{}
		}
		e.img = loc
		e.version, e.size = imageMeta(body)
		p.segs[loc.seg].live += loc.n
	case recLabel:
		if e == nil {
			return // of an object gone since
		}
		p.dead(e.label)
		e.label = loc
		p.segs[loc.seg].live += loc.n
	case recDelete:
		p.drop(h.key)
		return
	}
	e.last = max(e.last, seq)
}

// drop removes k from the index (mu held).
func (p *pack) drop(k ObjKey) {
	if e := p.index[k]; e != nil {
		p.dead(e.img)
		p.dead(e.label)
		delete(p.index, k)
	}
}

// dead counts record loc as no longer live (mu held).
func (p *pack) dead(loc recLoc) {
	if loc.n == 0 {
		return
	}
	if sg := p.segs[loc.seg]; sg != nil {
		sg.live -= loc.n
	}
}

// appendRecord writes rec at the end of the log and returns its place and
// sequence number (mu held). The caller updates the index.
func (p *pack) appendRecord(rec []byte) (recLoc, uint64, error) {
	sg := p.active
	if sg == nil || (sg.size > 0 && sg.size+int64(len(rec)) > p.segBytes) {
		var err error
		if sg, err = p.newSegment(); err != nil {
			return recLoc{}, 0, err
		}
	}
	if _, err := sg.f.WriteAt(rec, sg.size); err != nil {
		return recLoc{}, 0, err
	}
	loc := recLoc{seg: sg.seq, off: sg.size, n: int64(len(rec))}
	sg.size += loc.n
	sg.dirty = true
	p.written++

	return loc, p.written, nil
}

// newSegment starts the next segment (mu held).
func (p *pack) newSegment() (*segment, error) {
	seq := uint64(1)
	if p.active != nil {
		seq = p.active.seq + 1
	}
	f, err := p.fs.OpenFile(filepath.Join(p.dir, segName(seq)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	sg := &segment{seq: seq, f: f}
	p.segs[seq] = sg
	p.active = sg
	p.newDirs = true
	return sg, nil
}

// put appends a new image of k and makes it the object's latest.
func (p *pack) put(k ObjKey, im *image) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.putRecord(encodeRecord(recImage, k, 0, im.encode()))
}

// putRecord appends image record rec, then the object's label again, so
// the label follows the image that would otherwise end it (mu held).
func (p *pack) putRecord(rec []byte) (uint64, error) {
	h, _ := decodeHeader(rec)
	var label []byte
	if e := p.index[h.key]; e != nil && e.label.n > 0 {
		label = make([]byte, e.label.n)
		if _, err := p.segs[e.label.seg].f.ReadAt(label, e.label.off); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if _, err := decodeHeader(label); err != nil {
			label = nil // damaged: the object loses its label, not its data
		}
	}
	loc, seq, err := p.appendRecord(rec)
	if err != nil {
		return 0, err
	}
	p.apply(h, loc, rec[recHeaderBytes:], seq)
	if label != nil {
		lloc, lseq, err := p.appendRecord(label)
		if err != nil {
			return 0, err
		}
		lh, _ := decodeHeader(label)
		p.apply(lh, lloc, nil, lseq)
		seq = lseq
	}
	return seq, nil
}

// putLabel appends label as k's label; k must be in the pack.
func (p *pack) putLabel(k ObjKey, label []byte) (uint64, error) {
	rec := encodeRecord(recLabel, k, 0, label)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.index[k] == nil {
		return 0, nil
	}
	loc, seq, err := p.appendRecord(rec)
	if err != nil {
		return 0, err
	}
	h, _ := decodeHeader(rec)
	p.apply(h, loc, nil, seq)
	return seq, nil
}

// remove appends a delete of k, if k is in the pack; seq 0 if not.
func (p *pack) remove(k ObjKey) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.index[k] == nil {
		return 0, nil
	}
	e := p.index[k]
	return p.appendDelete(k, max(e.img.seg, e.label.seg))
}

// before reports whether record a lies before record b in the log.
func before(a, b recLoc) bool {
	return a.seg < b.seg || (a.seg == b.seg && a.off < b.off)
}

// appendDelete appends a delete of k and drops it from the index (mu
// held, or opening). The record names killed, the segment of the record
// it ends: every older record of k lies in it or before it, so
// compaction knows when none is left for the delete to hide.
func (p *pack) appendDelete(k ObjKey, killed uint64) (uint64, error) {
	_, seq, err := p.appendRecord(encodeRecord(recDelete, k, killed, nil))
	if err != nil {
		return 0, err
	}
	p.drop(k)
	return seq, nil
}

// lookup returns a copy of k's entry, if k is packed.
func (p *pack) lookup(k ObjKey) (packEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.index[k]
	if e == nil {
		return packEntry{}, false
	}
	return *e, true
}

// readImage reads and checks k's latest image: ErrCorrupt if it does not
// check, (nil, nil) if k is not packed.
func (p *pack) readImage(k ObjKey) (*image, error) {
	body, err := p.readBody(k, func(e *packEntry) recLoc { return e.img })
	if body == nil || err != nil {
		return nil, err
	}
	im, err := decodeImage(body)
	if err != nil {
		return nil, wire.Errorf(wire.ErrCorrupt, "object %x.%d: packed image: %v", k.Ino, k.Comp, err)
	}
	return im, nil
}

// readLabel reads k's label, nil if it has none or it does not check.
func (p *pack) readLabel(k ObjKey) []byte {
	body, err := p.readBody(k, func(e *packEntry) recLoc { return e.label })
	if err != nil {
		return nil
	}
	return body
}

// readBody reads the body of the record of k that which picks, checked.
func (p *pack) readBody(k ObjKey, which func(*packEntry) recLoc) ([]byte, error) {
	p.rmu.RLock()
	defer p.rmu.RUnlock()
	p.mu.Lock()
	e := p.index[k]
	var loc recLoc
	var f File
	if e != nil {
		loc = which(e)
		if sg := p.segs[loc.seg]; sg != nil {
			f = sg.f
		}
	}
	p.mu.Unlock()
	if loc.n == 0 {
		return nil, nil
	}
	if f == nil {
		return nil, wire.Errorf(wire.ErrCorrupt, "object %x.%d: packed record in a removed segment", k.Ino, k.Comp)
	}
	rec := make([]byte, loc.n)
	if _, err := f.ReadAt(rec, loc.off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	h, err := decodeHeader(rec)
	if err != nil || h.key != k || recBytes(int(h.bodyLen)) != loc.n {
		return nil, wire.Errorf(wire.ErrCorrupt, "object %x.%d: packed record header: %v", k.Ino, k.Comp, err)
	}
	body := rec[recHeaderBytes : recHeaderBytes+h.bodyLen]
	if wire.CRC(body) != h.bodyCRC {
		return nil, wire.Errorf(wire.ErrCorrupt, "object %x.%d: packed record checksum mismatch", k.Ino, k.Comp)
	}
	return body, nil
}

// waitDurable returns once append seq is durable. Callers arriving while
// a sync runs wait for it and share the next: one fsync covers every
// request waiting at the time.
func (p *pack) waitDurable(seq uint64) error {
	p.smu.Lock()
	defer p.smu.Unlock()
	for p.durable < seq {
		if p.syncing {
			p.scond.Wait()
			continue
		}
		p.syncing = true
		p.smu.Unlock()
		upTo, err := p.syncOnce()
		p.smu.Lock()
		p.syncing = false
		if err == nil {
			p.durable = max(p.durable, upTo)
		}
		p.scond.Broadcast()
		if err != nil {
			return err
		}
	}
	return nil
}

// syncOnce fsyncs every segment appended to, oldest first, and the
// directory if segments came or went, and returns the last append it
// covers. A failed fsync stops the process.
func (p *pack) syncOnce() (uint64, error) {
	p.mu.Lock()
	upTo := p.written
	var dirty []*segment
	for _, sg := range p.segs {
		if sg.dirty {
			dirty = append(dirty, sg)
			sg.dirty = false
		}
	}
	dirs := p.newDirs
	p.newDirs = false
	p.mu.Unlock()
	slices.SortFunc(dirty, func(a, b *segment) int { return cmp.Compare(a.seq, b.seq) })

	for _, sg := range dirty {
		if err := sg.f.Sync(); err != nil {
			err = fmt.Errorf("fsync pack segment %s: %w", segName(sg.seq), err)
			p.onFatal(err)
			return 0, err
		}
	}
	if dirs {
		if _, err := syncDirOn(p.fs, p.dir); err != nil {
			// An open that fails is as fatal here: the segment's name
			// cannot be made durable, and records in it were appended.
			err = fmt.Errorf("fsync directory %s: %w", p.dir, err)
			p.onFatal(err)
			return 0, err
		}
	}
	return upTo, nil
}

// keys lists the packed objects.
func (p *pack) keys() []ObjKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ObjKey, 0, len(p.index))
	for k := range p.index {
		out = append(out, k)
	}
	return out
}

// usedBytes is the object data the pack holds.
func (p *pack) usedBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, e := range p.index {
		n += e.size
	}
	return n
}

func (p *pack) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sg := range p.segs {
		_ = sg.f.Close()
	}
}
