package osd

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
// wins. Each object's records carry its incarnation (birth), so a delete
// or a label can only ever act on the incarnation it was written for,
// wherever compaction moves it. An in-memory index maps each object to
// its records; it is rebuilt at open by reading every segment. A torn
// tail is cut off; a damaged record past the last synced mark (appended
// after each group fsync) was torn by the power cut and is skipped, the
// state before it standing; one before the mark rotted, and its object
// is made missing, so it is rebuilt from its redundancy, never read as an
// older state. Compaction (packcompact.go) copies the live records of
// segments mostly dead forward and removes them. Objects that grow past
// packMaxBytes move to their own files.
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
	births  uint64 // the last incarnation number drawn
	// syncedMark: everything before it was durable (the last synced
	// record read at open, and where each group sync reached since).
	syncedMark recLoc
	pending    map[ObjKey]pendingLabel // while opening

	smu     sync.Mutex
	scond   sync.Cond
	syncing bool   // a group sync is running
	durable uint64 // appends up to this one are durable
}

// segment is one log file.
type segment struct {
	seq   uint64
	salt  uint64 // in its name; salts its records' header checksums
	f     File
	size  int64 // bytes appended
	live  int64 // bytes of its records that are the latest of their object
	dirty bool  // appended since its last fsync
}

// packEntry is where an object's latest records are.
type packEntry struct {
	birth   uint64 // its incarnation
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

func segName(seq, salt uint64) string { return fmt.Sprintf("%016x-%016x.log", seq, salt) }

// parseSegName reads a segment file's name back.
func parseSegName(name string) (seq, salt uint64, ok bool) {
	base, ok := strings.CutSuffix(name, ".log")
	seqText, saltText, ok2 := strings.Cut(base, "-")
	seq, err1 := strconv.ParseUint(seqText, 16, 64)
	salt, err2 := strconv.ParseUint(saltText, 16, 64)
	return seq, salt, ok && ok2 && err1 == nil && err2 == nil && len(seqText) == 16 && len(saltText) == 16
}

// openPack opens (creating) the pack in dir and reads its index.
func openPack(fsys FS, dir string, segBytes int64, onFatal func(error)) (*pack, error) {
	p := &pack{fs: fsys, dir: dir, onFatal: onFatal, segBytes: segBytes, index: map[ObjKey]*packEntry{}, segs: map[uint64]*segment{}, pending: map[ObjKey]pendingLabel{}}
	p.scond.L = &p.smu
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The pack's own name must outlive a power cut as its contents do.
	if _, err := syncDirOn(fsys, filepath.Dir(dir)); err != nil {
		return nil, err
	}
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type found struct{ seq, salt uint64 }
	var segs []found
	for _, e := range entries {
		if seq, salt, ok := parseSegName(e.Name()); ok {
			segs = append(segs, found{seq, salt})
		}
	}
	slices.SortFunc(segs, func(a, b found) int { return cmp.Compare(a.seq, b.seq) })
	var damaged []damage
	for i, sg := range segs {
		d, err := p.load(sg.seq, sg.salt, i == len(segs)-1)
		if err != nil {
			p.close()
			return nil, err
		}
		damaged = append(damaged, d...)
	}
	p.pending = nil // labels of incarnations gone
	if err := p.mend(damaged); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// damage is a record found damaged at open, as its trailer names it.
type damage struct {
	h  recHeader
	at recLoc
}

// pendingLabel is a label read at open before any image of its
// incarnation: compaction copied the image past it. The image adopts it.
type pendingLabel struct {
	birth uint64
	loc   recLoc
}

// load reads segment seq into the index. The last segment's torn tail is
// cut off.
func (p *pack) load(seq, salt uint64, last bool) ([]damage, error) {
	path := filepath.Join(p.dir, segName(seq, salt))
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
	recs, end := scanSegment(salt, b)
	sg := &segment{seq: seq, salt: salt, f: f, size: int64(len(b))}
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
		loc := recLoc{seg: seq, off: r.off, n: recBytes(int(r.h.bodyLen))}
		switch {
		case r.damaged:
			damaged = append(damaged, damage{h: r.h, at: loc})
		case r.h.kind == recSynced:
			if m := syncedAt(r.body); before(p.syncedMark, m) {
				p.syncedMark = m
			}
		default:
			p.apply(r.h, loc, r.body, 0)
		}
		p.births = max(p.births, r.h.birth)
	}
	return damaged, nil
}

// syncedAt is a synced record's mark: a segment and an offset, as one
// recLoc (n 0).
func syncedAt(body []byte) recLoc {
	return recLoc{seg: binary.LittleEndian.Uint64(body), off: int64(binary.LittleEndian.Uint64(body[8:]))}
}

// mend deals with records found damaged at open. One past the last
// synced mark was appended after the last fsync and torn by the power
// cut: nothing acknowledged it as durable, and the state before it
// stands. One before it rotted after it was durable: a damaged image
// makes its incarnation missing, durably (a read must not find an older
// image of it, and its redundancy rebuilds it), unless a later image
// ended it; a damaged delete is written again; a damaged label is lost
// (the MDS writes labels again as files change).
func (p *pack) mend(damaged []damage) error {
	var last uint64
	for _, d := range damaged {
		if !before(d.at, p.syncedMark) {
			continue
		}
		var seq uint64
		var err error
		switch d.h.kind {
		case recImage:
			if e := p.index[d.h.key]; e != nil && (e.birth != d.h.birth || before(d.at, e.img)) {
				continue
			}
			// Any segment may hold a label of it: the delete outlives them all.
			seq, err = p.appendDelete(d.h.key, d.h.birth, p.active.seq)
		case recDelete:
			seq, err = p.appendDelete(d.h.key, d.h.birth, d.h.killed)
		}
		if err != nil {
			return err
		}
		last = max(last, seq)
	}
	if last > 0 {
		return p.waitDurable(last)
	}
	return nil
}

// apply records in the index that record h at loc is now the latest of
// its kind for its incarnation (mu held, or opening).
func (p *pack) apply(h recHeader, loc recLoc, body []byte, seq uint64) {
	e := p.index[h.key]
	switch h.kind {
	case recImage:
		if e != nil && e.birth != h.birth {
			p.drop(h.key) // a new incarnation: the old one's records are dead
			e = nil
		}
		if e == nil {
			e = &packEntry{birth: h.birth}
			p.index[h.key] = e
			if l, ok := p.pending[h.key]; ok && l.birth == h.birth {
				e.label = l.loc
				p.segs[l.loc.seg].live += l.loc.n
			}
			delete(p.pending, h.key)
		} else {
			p.dead(e.img)
		}
		e.img = loc
		e.version, e.size = imageMeta(body)
		p.segs[loc.seg].live += loc.n
	case recLabel:
		if e == nil || e.birth != h.birth {
			if p.pending != nil {
				p.pending[h.key] = pendingLabel{birth: h.birth, loc: loc}
			}
			return
		}
		p.dead(e.label)
		e.label = loc
		p.segs[loc.seg].live += loc.n
	case recDelete:
		if l, ok := p.pending[h.key]; ok && l.birth == h.birth {
			delete(p.pending, h.key)
		}
		if e != nil && e.birth == h.birth {
			p.drop(h.key)
		}
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

// appendRecord writes the record that enc lays out for the segment it
// goes to at the end of the log, and returns its place and sequence
// number (mu held). The caller updates the index.
func (p *pack) appendRecord(n int64, enc func(salt uint64) []byte) (recLoc, uint64, error) {
	sg := p.active
	if sg == nil || (sg.size > 0 && sg.size+n > p.segBytes) {
		var err error
		if sg, err = p.newSegment(); err != nil {
			return recLoc{}, 0, err
		}
	}
	rec := enc(sg.salt)
	if _, err := sg.f.WriteAt(rec, sg.size); err != nil {
		return recLoc{}, 0, err
	}
	loc := recLoc{seg: sg.seq, off: sg.size, n: int64(len(rec))}
	sg.size += loc.n
	sg.dirty = true
	p.written++
	return loc, p.written, nil
}

// newSegment starts the next segment, with a salt of its own (mu held).
func (p *pack) newSegment() (*segment, error) {
	seq := uint64(1)
	if p.active != nil {
		seq = p.active.seq + 1
	}
	salt := rand.Uint64()
	f, err := p.fs.OpenFile(filepath.Join(p.dir, segName(seq, salt)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	sg := &segment{seq: seq, salt: salt, f: f}
	p.segs[seq] = sg
	p.active = sg
	p.newDirs = true
	return sg, nil
}

// put appends a new image of k and makes it the object's latest; an
// object new to the pack gets a new incarnation.
func (p *pack) put(k ObjKey, im *image) (uint64, error) {
	body := im.encode()
	p.mu.Lock()
	defer p.mu.Unlock()
	h := recHeader{kind: recImage, key: k}
	if e := p.index[k]; e != nil {
		h.birth = e.birth
	} else {
		p.births++
		h.birth = p.births
	}
	return p.appendApplied(h, body)
}

// appendApplied appends record h with body and applies it to the index
// (mu held, or opening).
func (p *pack) appendApplied(h recHeader, body []byte) (uint64, error) {
	loc, seq, err := p.appendRecord(recBytes(len(body)), func(salt uint64) []byte { return encodeRecord(salt, h, body) })
	if err != nil {
		return 0, err
	}
	p.apply(h, loc, body, seq)
	return seq, nil
}

// putLabel appends label as k's label; k must be in the pack.
func (p *pack) putLabel(k ObjKey, label []byte) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.index[k]
	if e == nil {
		return 0, nil
	}
	return p.appendApplied(recHeader{kind: recLabel, key: k, birth: e.birth}, label)
}

// remove appends a delete of k, if k is in the pack; seq 0 if not.
func (p *pack) remove(k ObjKey) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.index[k]
	if e == nil {
		return 0, nil
	}
	return p.appendDelete(k, e.birth, max(e.img.seg, e.label.seg))
}

// before reports whether record a lies before record b in the log.
func before(a, b recLoc) bool {
	return a.seg < b.seg || (a.seg == b.seg && a.off < b.off)
}

// appendDelete appends a delete of incarnation birth of k and drops it
// from the index (mu held, or opening). The record names killed, the
// newest segment holding a record of that incarnation: compaction keeps
// the delete while any segment up to it remains.
func (p *pack) appendDelete(k ObjKey, birth, killed uint64) (uint64, error) {
	return p.appendApplied(recHeader{kind: recDelete, key: k, birth: birth, killed: killed}, nil)
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
	var sg *segment
	if e != nil {
		loc = which(e)
		sg = p.segs[loc.seg]
	}
	p.mu.Unlock()
	if loc.n == 0 {
		return nil, nil
	}
	if sg == nil {
		return nil, wire.Errorf(wire.ErrCorrupt, "object %x.%d: packed record in a removed segment", k.Ino, k.Comp)
	}
	rec := make([]byte, loc.n)
	if _, err := sg.f.ReadAt(rec, loc.off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	h, err := decodeHeader(sg.salt, rec)
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
	var mark recLoc
	if p.active != nil {
		mark = recLoc{seg: p.active.seq, off: p.active.size}
	}
	p.mu.Unlock()
	slices.SortFunc(dirty, func(a, b *segment) int { return cmp.Compare(a.seq, b.seq) })
	if err := p.fsync(dirty, dirs); err != nil {
		p.mu.Lock() // a later sync tries them again (if the process goes on)
		for _, sg := range dirty {
			sg.dirty = true
		}
		p.newDirs = p.newDirs || dirs
		p.mu.Unlock()
		p.onFatal(err)
		return 0, err
	}
	p.noteSynced(mark)
	return upTo, nil
}

// fsync syncs segments, then the directory if dirs.
func (p *pack) fsync(segs []*segment, dirs bool) error {
	for _, sg := range segs {
		if err := sg.f.Sync(); err != nil {
			return fmt.Errorf("fsync pack segment %s: %w", segName(sg.seq, sg.salt), err)
		}
	}
	if dirs {
		if _, err := syncDirOn(p.fs, p.dir); err != nil {
			// An open that fails is as fatal here: the segment's name
			// cannot be made durable, and records in it were appended.
			return fmt.Errorf("fsync directory %s: %w", p.dir, err)
		}
	}
	return nil
}

// noteSynced appends a synced record: everything before mark is durable.
// It is not synced itself (the next sync takes it along); lost, an open
// takes damage a little before the mark for a torn write, not rot.
func (p *pack) noteSynced(mark recLoc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !before(p.syncedMark, mark) {
		return
	}
	p.syncedMark = mark
	var body [syncedBodyBytes]byte
	binary.LittleEndian.PutUint64(body[:], mark.seg)
	binary.LittleEndian.PutUint64(body[8:], uint64(mark.off))
	h := recHeader{kind: recSynced}
	_, _, _ = p.appendRecord(recBytes(len(body)), func(salt uint64) []byte { return encodeRecord(salt, h, body[:]) })
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
