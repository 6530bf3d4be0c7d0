package mds

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/core/route"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// Scavenging (Swift). The MDS writes a label into every object of a file
// (mdsproto.ObjectLabel: ino, path, layout, size) whenever those change,
// in the background. If the MDS's store is lost, recoverMeta reads every
// OSD's labels and rebuilds the namespace: each file at its labelled path
// with its own ino (objects are named by it), layout and size.

const (
	maxLabelQueue = 1 << 20                // files waiting for their labels to be written
	labelBatch    = 256                    // files labelled per tick
	labelEvery    = 200 * time.Millisecond // how often the label queue is drained
	lostFound     = "/lost+found"
)

// labelQueue holds files whose labels must be (re)written.
type labelQueue struct {
	// What labelling works with, set once at Start.
	kv    kv.Engine
	cfg   *Config
	keys  *keyRing   // capabilities for the label writes
	osds  *osdClient // the label writes themselves
	fkeys *fileKeys  // labels' MACs
	shell labelShell

	mu   sync.Mutex
	q    []uint64
	in   map[uint64]bool
	busy int // taken off q, being written
}

// labelShell is what labelling asks of the rest of the MDS.
type labelShell interface {
	serving() bool // whether this process may act now
}

// pending counts files whose labels are queued or being written.
func (lq *labelQueue) pending() int64 {
	lq.mu.Lock()
	defer lq.mu.Unlock()
	return int64(len(lq.q) + lq.busy)
}

func (lq *labelQueue) queue(inos ...uint64) {
	lq.mu.Lock()
	defer lq.mu.Unlock()
	for _, ino := range inos {
		if !lq.in[ino] && len(lq.q) < maxLabelQueue {
			lq.in[ino] = true
			lq.q = append(lq.q, ino)
		}
	}
}

// relabelTree queues rec's file, or every file below a renamed directory.
func (lq *labelQueue) relabelTree(ctx context.Context, rec *inodeRec) {
	if rec.Type == mdsproto.TypeFile {
		lq.queue(rec.Ino)
		return
	}
	var inos []uint64
	_ = lq.kv.View(ctx, func(r kv.Reader) error {
		inos = inos[:0] // a run again (claim_ops.go) starts over
		return collectFiles(r, rec, &inos, maxLabelQueue)
	})
	lq.queue(inos...)
}

func (lq *labelQueue) loop(ctx context.Context) {
	t := time.NewTicker(labelEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lq.mu.Lock()
		n := min(len(lq.q), labelBatch)
		batch := slices.Clone(lq.q[:n])
		lq.q = lq.q[n:]
		for _, ino := range batch {
			delete(lq.in, ino)
		}
		lq.busy = len(batch)
		lq.mu.Unlock()
		if lq.shell.serving() { // else dropped, as a crash drops the queue: labels are written again when the file changes
			lq.labelFiles(ctx, batch)
		}
		lq.mu.Lock()
		lq.busy = 0
		lq.mu.Unlock()
	}
}

// pathOf walks a file's Parent and Name links up to the root; "" if a
// link is missing.
func pathOf(r kv.Reader, rec *inodeRec) string {
	var parts []string
	cur := rec
	for depth := 0; cur.Ino != rootIno; depth++ {
		if cur.Parent == 0 || cur.Name == "" || depth > maxDepth {
			return ""
		}
		parts = append(parts, cur.Name)
		next, err := getInodeNoTimes(r, cur.Parent) // names only: no directory's times
		if err != nil {
			return ""
		}
		cur = next
	}
	slices.Reverse(parts)
	return "/" + strings.Join(parts, "/")
}

// osdLabels are the labels one Labels request carries to an OSD.
type osdLabels struct {
	entries []osdproto.LabelEntry
	data    []byte
}

// maxLabelsBytes bounds the label bytes of one Labels request.
const maxLabelsBytes = 1 << 20

// labelFiles writes the labels of inos into each of their objects, with
// one Labels request per OSD (more past its bounds). Failures are left:
// a later change or sweep labels the files again.
func (lq *labelQueue) labelFiles(ctx context.Context, inos []uint64) {
	now := lq.cfg.Now()
	byOSD := map[uint32][]*osdLabels{}
	for _, ino := range inos {
		l, label, ok := lq.labelOf(ctx, ino, now)
		if !ok {
			continue
		}
		comps := map[uint32][]uint32{}
		for comp, id := range l.OSDs {
			comps[id] = append(comps[id], uint32(comp))
		}
		for id, cs := range comps {
			reqs := byOSD[id]
			if len(reqs) == 0 || len(reqs[len(reqs)-1].entries) == osdproto.MaxLabelEntries ||
				len(reqs[len(reqs)-1].data)+len(label) > maxLabelsBytes {
				reqs = append(reqs, &osdLabels{})
				byOSD[id] = reqs
			}
			r := reqs[len(reqs)-1]
			r.entries = append(r.entries, osdproto.LabelEntry{Ino: ino, Version: l.Version, Comps: cs, Len: uint32(len(label))})
			r.data = append(r.data, label...)
		}
	}
	c := lq.keys.ring.Issue(0, capability.Write, 0, now.Add(time.Minute))
	for id, reqs := range byOSD {
		for _, r := range reqs {
			_, err := lq.osds.callData(ctx, id, osdproto.OpLabels, osdproto.Req{Cap: c, Labels: r.entries}, r.data, now)
			if errors.Is(err, wire.ErrUnknownOp) {
				lq.labelOneByOne(ctx, id, r, now) // an OSD of an older release
			}
		}
	}
}

// labelOneByOne sends r's labels to OSD id a file at a time (Label).
func (lq *labelQueue) labelOneByOne(ctx context.Context, id uint32, r *osdLabels, now time.Time) {
	off := 0
	for _, e := range r.entries {
		c := lq.keys.ring.Issue(e.Ino, capability.Write, e.Version, now.Add(time.Minute))
		label := r.data[off : off+int(e.Len)]
		off += int(e.Len)
		_, _ = lq.osds.callData(ctx, id, osdproto.OpLabel, osdproto.Req{Cap: c, Ino: e.Ino, Comps: e.Comps}, label, now)
	}
}

// labelOf is file ino's layout and sealed label; ok false if it has none
// to write (gone, no layout, no path).
func (lq *labelQueue) labelOf(ctx context.Context, ino uint64, now time.Time) (mdsproto.Layout, []byte, bool) {
	var rec *inodeRec
	var p string
	err := lq.kv.View(ctx, func(r kv.Reader) error {
		var err error
		if rec, err = getInode(r, ino); err == nil {
			p = pathOf(r, rec)
		}
		return err
	})
	if err != nil || rec.Layout == nil || p == "" {
		return mdsproto.Layout{}, nil, false
	}
	l := rec.Layout
	label, err := lq.fkeys.sealLabel(mdsproto.ObjectLabel{Ino: ino, Path: p, Spec: l.Spec, Groups: l.Groups, OSDs: l.OSDs,
		Version: l.Version, Size: rec.Stored(), Mode: rec.Mode, MtimeNs: rec.MtimeNs, LabeledNs: now.UnixNano(),
		WrappedKey: rec.WrappedKey, Uid: rec.Uid, Gid: rec.Gid})
	if err != nil || len(label) > osdproto.MaxLabelLen {
		return mdsproto.Layout{}, nil, false
	}
	return *l, label, true
}

// scavenged is what the OSDs say about one file.
type scavenged struct {
	label     mdsproto.ObjectLabel
	labeled   bool
	authentic bool // the label carries this MDS's MAC
	objects   int
}

// recoverMeta rebuilds the namespace from the labels on the OSDs.
func (s *Server) recoverMeta(ctx context.Context, req mdsproto.RecoverReq) (mdsproto.RecoverResp, error) {
	var out mdsproto.RecoverResp
	if !req.Force {
		empty := true
		if err := s.kv.View(ctx, func(r kv.Reader) error {
			var err error
			empty, err = dirEmpty(r, rootIno)
			return err
		}); err != nil {
			return out, err
		}
		if !empty {
			return out, wire.Errorf(wire.ErrNotEmpty, "the namespace is not empty; recover-metadata rebuilds a lost one (force merges)")
		}
	}
	files, err := s.scavenge(ctx, &out)
	if err != nil {
		return out, err
	}
	var maxIno uint64
	var all []*scavenged
	for ino, f := range files {
		maxIno = max(maxIno, ino)
		all = append(all, f)
	}
	// The counter counts inode numbers' high bits (internal/core/route): past every
	// recovered number's, no new one can equal it whatever its slot.
	if err := s.kv.Update(ctx, func(tx kv.Txn) error { return raiseCounter(tx, keyNextIno, maxIno>>route.SlotBits+1) }); err != nil {
		return out, err
	}
	s.inos.reset() // a range taken before may hold recovered numbers

	sort.Slice(all, func(i, j int) bool { return all[i].label.Path < all[j].label.Path })
	dirs := map[string]bool{"/": true}
	for _, f := range all {
		if !f.labeled {
			addProblem(&out, fmt.Sprintf("inode %d: %d objects without a label; not restored", f.label.Ino, f.objects))
			continue
		}
		if !f.authentic && f.label.Spec != "" {
			if spec, err := layout.Parse(f.label.Spec); err == nil && spec.Sealed {
				addProblem(&out, fmt.Sprintf("inode %d (%s): encrypted, and no label of it is this MDS's; not restored", f.label.Ino, f.label.Path))
				continue
			}
		}
		s.restoreFile(ctx, f.label, dirs, &out)
	}
	return out, nil
}

// newerLabel reports whether label l wins over the one kept: one this
// MDS wrote over one it cannot vouch for (an older MDS's, or an OSD's
// invention), then the higher layout version, then the later written.
func newerLabel(l mdsproto.ObjectLabel, authentic bool, kept mdsproto.ObjectLabel, keptAuthentic bool) bool {
	if authentic != keptAuthentic {
		return authentic
	}
	return l.Version > kept.Version || l.Version == kept.Version && l.LabeledNs > kept.LabeledNs
}

// scanCapLifetime is how long recover-metadata's scan capability lasts.
const scanCapLifetime = time.Hour

// scavenge reads every up OSD's object list and keeps, per file, the
// newest label (highest layout version, then latest written).
func (s *Server) scavenge(ctx context.Context, out *mdsproto.RecoverResp) (map[uint64]*scavenged, error) {
	now := s.cfg.Now()
	c := s.keys.ring.Issue(0, capability.Read, 0, now.Add(scanCapLifetime))
	files := map[uint64]*scavenged{}
	for id, v := range s.cluster.views(now) {
		if v.State != mdsproto.StateUp {
			addProblem(out, fmt.Sprintf("OSD %d is %s: its objects were not scanned", id, v.State))
			continue
		}
		cursor := ""
		for page := 0; ; page++ {
			entries, next, err := s.scanPage(ctx, id, c, cursor, now)
			if err != nil {
				return nil, fmt.Errorf("scan OSD %d: %w", id, err)
			}
			for _, e := range entries {
				out.Objects++
				f := files[e.Ino]
				if f == nil {
					f = &scavenged{label: mdsproto.ObjectLabel{Ino: e.Ino}}
					files[e.Ino] = f
				}
				f.objects++
				var l mdsproto.ObjectLabel
				if len(e.Label) == 0 {
					continue
				}
				authentic, err := s.decodeLabel(e.Label, &l)
				if err != nil || l.Ino != e.Ino {
					continue
				}
				if !f.labeled || newerLabel(l, authentic, f.label, f.authentic) {
					f.label, f.labeled, f.authentic = l, true, authentic
				}
			}
			if next == "" {
				break
			}
			cursor = next
		}
	}
	return files, nil
}

func (s *Server) scanPage(ctx context.Context, id uint32, c capability.Cap, cursor string, now time.Time) ([]osdproto.ScanEntry, string, error) {
	req := osdproto.Req{Cap: c, Cursor: []byte(cursor), Len: osdproto.MaxScan}
	buf := make([]byte, wire.MaxDataBytes)
	meta, n, err := s.osds.scan(ctx, id, req, buf, now)
	if err != nil {
		return nil, "", err
	}
	var entries []osdproto.ScanEntry
	if err := json.Unmarshal(buf[:n], &entries); err != nil {
		return nil, "", fmt.Errorf("%w: scan reply: %v", wire.ErrBadRequest, err)
	}
	return entries, string(meta), nil
}

// restoreFile links one scavenged file back at its labelled path, or in
// lost+found if the path is unusable or taken.
func (s *Server) restoreFile(ctx context.Context, l mdsproto.ObjectLabel, dirs map[string]bool, out *mdsproto.RecoverResp) {
	p := path.Clean(l.Path)
	if _, err := splitPath(p); err != nil || p == "/" || !strings.HasPrefix(p, "/") {
		p = ""
	}
	lay := &mdsproto.Layout{Spec: l.Spec, Groups: l.Groups, OSDs: l.OSDs, Version: l.Version}
	decoded, err := lay.Decode()
	if err != nil || l.Size < 0 || l.Ino <= rootIno {
		addProblem(out, fmt.Sprintf("inode %d: label invalid (layout %v, size %d)", l.Ino, err, l.Size))
		return
	}
	spec := decoded.Spec
	if spec.Sealed && len(l.WrappedKey) == 0 {
		addProblem(out, fmt.Sprintf("inode %d (%s): encrypted, and its label holds no key", l.Ino, l.Path))
	}
	for _, target := range []string{p, fmt.Sprintf("%s/%d", lostFound, l.Ino)} {
		if target == "" {
			continue
		}
		dir := path.Dir(target)
		if !dirs[dir] {
			if _, err := s.mkdir(ctx, mdsproto.MkdirReq{Path: dir, Parents: true, Mode: 0o755}); err != nil {
				continue
			}
			for d := dir; d != "/" && !dirs[d]; d = path.Dir(d) {
				dirs[d] = true
				out.Dirs++
			}
		}
		err := s.kv.Update(ctx, func(tx kv.Txn) error {
			parent, name, err := resolveParent(tx, nil, 0, target)
			if err != nil {
				return err
			}
			if _, taken, err := lookupChild(tx, parent.Ino, name); err != nil || taken {
				if err == nil {
					err = wire.Errorf(wire.ErrExists, "%s", target)
				}
				return err
			}
			if old, _ := getInode(tx, l.Ino); old != nil {
				return wire.Errorf(wire.ErrExists, "inode %d", l.Ino)
			}
			now := s.cfg.Now().UnixNano()
			rec := &inodeRec{Inode: mdsproto.Inode{Ino: l.Ino, Type: mdsproto.TypeFile, Mode: l.Mode & 0o7777, Sealed: spec.Sealed,
				Nlink: 1, MtimeNs: l.MtimeNs, CtimeNs: now, Layout: lay, Uid: l.Uid, Gid: l.Gid}, Parent: parent.Ino, Name: name, Base: l.Version,
				WrappedKey: l.WrappedKey}
			rec.SetStored(l.Size, spec.UnitBytes)
			if err := putInode(tx, rec); err != nil {
				return err
			}
			return link(tx, parent, name, rec)
		})
		if err == nil {
			out.Files++
			if target != p {
				out.Unnamed++
			}
			s.labels.queue(l.Ino)
			return
		}
		if target != p {
			addProblem(out, fmt.Sprintf("inode %d (%s): %v", l.Ino, l.Path, err))
		}
	}
}

// raiseCounter makes sure counter key hands out nothing below n.
func raiseCounter(tx kv.Txn, key []byte, n uint64) error {
	b, err := tx.Get(key)
	if err != nil {
		return err
	}
	if len(b) == 8 && binary.BigEndian.Uint64(b) >= n {
		return nil
	}
	return tx.Put(key, binary.BigEndian.AppendUint64(nil, n))
}

// decodeLabel reads an object's label: the protocol's codec, or format 1
// (JSON, first byte '{') for labels written before it.
// A label this MDS sealed reports authentic; one whose MAC is wrong is an
// error (forged or damaged), and an older MDS's (no MAC) is not authentic.
func (s *Server) decodeLabel(b []byte, l *mdsproto.ObjectLabel) (authentic bool, err error) {
	if len(b) > 0 && b[0] == '{' {
		return false, decodeFormat1(b, l)
	}
	var env mdsproto.SealedLabel
	if mdsproto.Unmarshal(b, &env) == nil && len(env.Label) > 0 {
		if !s.fkeys.labelMACValid(env.Label, env.MAC) {
			return false, wire.Errorf(wire.ErrCorrupt, "a label's MAC does not check")
		}
		return true, mdsproto.Unmarshal(env.Label, l)
	}
	return false, mdsproto.Unmarshal(b, l)
}

// maxRecoverProblems and maxProblemBytes bound the problems a recovery
// reports, so its answer fits a frame (1 MiB) however many files it could
// not restore and however long their paths.
const (
	maxRecoverProblems = 1000
	maxProblemBytes    = 512
)

func addProblem(out *mdsproto.RecoverResp, msg string) {
	if len(msg) > maxProblemBytes { // a label's path may be 4 KB: the list must fit a reply
		msg = msg[:maxProblemBytes] + "..."
	}
	switch n := len(out.Problems); {
	case n < maxRecoverProblems:
		out.Problems = append(out.Problems, msg)
	case n == maxRecoverProblems:
		out.Problems = append(out.Problems, "more problems not listed")
	}
}
