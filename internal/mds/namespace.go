package mds

import (
	"encoding/binary"
	"fmt"
	"path"
	"strings"

	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

const (
	rootIno      = 1
	maxNameBytes = 255
	maxPathBytes = 4096
	maxDepth     = 1024 // bound on parent-chain walks
	recFormat    = 1
)

// inodeRec is the stored form of an inode.
type inodeRec struct {
	Format int `json:"v"`
	mdsproto.Inode
	// timesUnread: a directory read without its times (dirtimes.go).
	timesUnread bool
	// WrappedKey is a sealed file's data key, wrapped (filekeys.go).
	WrappedKey []byte `json:"wk,omitempty"`
	// Parent and Name are the directory entry that names the inode (for
	// directories, rename cycle checks and layout inheritance; for files,
	// the path written into their objects' labels for scavenging).
	Parent uint64 `json:"parent,omitempty"`
	Name   string `json:"name,omitempty"`
	// Base is the layout version whose objects hold the file's data: a
	// re-layout of an empty file raises it, a repair (which keeps the
	// data) does not. Commits from older versions are refused.
	Base uint64 `json:"base,omitempty"`
	// Repair is set while a repair worker repairs the file; writers wait.
	Repair *repairLock `json:"repair,omitempty"`
	// Unnamed is set on a file created Unlinked until a commit publishes
	// it: a retried publish of a file since replaced must not bring it back.
	Unnamed bool `json:"unnamed,omitempty"`
	// Xattrs are the inode's extended attributes (bounded by maxXattrBytes).
	Xattrs map[string][]byte `json:"xattrs,omitempty"`
	// DirtyBy names, for a dirty component only one writer handle marked
	// (for its own failed unit writes), that handle: its commit may clear
	// the mark once it sent those writes again (CommitReq.CaughtUp).
	// Entries for components no longer dirty mean nothing.
	DirtyBy map[uint32]uint64 `json:"dirty_by,omitempty"`
}

type clusterRec struct {
	Format        int    `json:"v"`
	ID            string `json:"id"`
	DefaultLayout string `json:"default_layout"`
}

// getInode reads an inode, a directory's times included (dirtimes.go).
func getInode(r kv.Reader, ino uint64) (*inodeRec, error) {
	rec, err := getInodeNoTimes(r, ino)
	if err != nil || rec.Type != mdsproto.TypeDir {
		return rec, err
	}
	return rec, readDirTimes(r, rec)
}

// getInodeNoTimes reads an inode without a directory's times, which a
// transaction that only checks a directory's type, owner and mode (the
// directories a path walks through, a parent named into) must not read:
// every change of an entry in the directory writes them, and a read
// would make concurrent creates in one directory conflict. A directory
// so read cannot be stored again before its times are set (putInode).
func getInodeNoTimes(r kv.Reader, ino uint64) (*inodeRec, error) {
	var rec inodeRec
	ok, err := getRecord(r, inodeKey(ino), &rec)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, wire.Errorf(wire.ErrNotFound, "inode %d", ino)
	}
	rec.timesUnread = rec.Type == mdsproto.TypeDir
	return &rec, nil
}

// getInodes reads several inodes, in one engine request where the engine
// can (kv.GetMany): a listing's entries.
func getInodes(r kv.Reader, inos []uint64) ([]*inodeRec, error) {
	keys := make([][]byte, len(inos))
	for i, ino := range inos {
		keys[i] = inodeKey(ino)
	}
	vals, err := kv.GetMany(r, keys)
	if err != nil {
		return nil, err
	}
	out := make([]*inodeRec, len(inos))
	var dirs []*inodeRec
	var timeKeys [][]byte
	for i, v := range vals {
		if v == nil {
			return nil, wire.Errorf(wire.ErrNotFound, "inode %d", inos[i])
		}
		out[i] = &inodeRec{}
		if err := decodeRecord(v, out[i]); err != nil {
			return nil, fmt.Errorf("record %q: %w", keys[i], err)
		}
		if out[i].Type == mdsproto.TypeDir {
			dirs, timeKeys = append(dirs, out[i]), append(timeKeys, dirTimesKey(out[i].Ino))
		}
	}
	if len(dirs) == 0 {
		return out, nil
	}
	times, err := kv.GetMany(r, timeKeys)
	if err != nil {
		return nil, err
	}
	for i, b := range times {
		var t dirTimesRec
		if b == nil {
			continue
		}
		if err := decodeRecord(b, &t); err != nil {
			return nil, fmt.Errorf("record %q: %w", timeKeys[i], err)
		}
		dirs[i].MtimeNs, dirs[i].CtimeNs = t.MtimeNs, t.CtimeNs
	}
	return out, nil
}

// putInode stores rec and keeps the repair index in step with it: a file
// with dirty components or a repair lock is listed there, so that repair workers
// find the work without reading every inode while the cluster is steady.
func putInode(tx kv.Txn, rec *inodeRec) error {
	rec.Format = recFormat
	if rec.Type == mdsproto.TypeDir {
		if rec.timesUnread {
			return fmt.Errorf("mds: bug: directory %d stored with times it did not read", rec.Ino)
		}
		if err := putDirTimes(tx, rec); err != nil {
			return err
		}
	}
	if err := putRecord(tx, inodeKey(rec.Ino), rec); err != nil {
		return err
	}
	switch {
	case rec.Layout == nil:
		return nil // directories and symlinks are never repaired
	case len(rec.Dirty) > 0 || rec.Repair != nil:
		return tx.Put(repairKey(rec.Ino), []byte{1}) // non-empty: an empty value reads as absent
	}
	return tx.Delete(repairKey(rec.Ino))
}

// deleteInode removes a file's inode record and its repair index entry
// (a directory's goes in dropLink, with its times).
func deleteInode(tx kv.Txn, ino uint64) error {
	if err := tx.Delete(repairKey(ino)); err != nil {
		return err
	}
	if err := tx.Delete(lostKey(ino)); err != nil {
		return err
	}
	return tx.Delete(inodeKey(ino))
}

func nextCounter(tx kv.Txn, key []byte, first uint64) (uint64, error) {
	return takeFromCounter(tx, key, first, 1)
}

// takeFromCounter takes n numbers from the counter at key (first, if it
// has none yet) and returns the first of them.
func takeFromCounter(tx kv.Txn, key []byte, first, n uint64) (uint64, error) {
	b, err := tx.Get(key)
	if err != nil {
		return 0, err
	}
	if len(b) == 8 {
		first = binary.BigEndian.Uint64(b)
	}
	return first, tx.Put(key, binary.BigEndian.AppendUint64(nil, first+n))
}

// splitPath validates and cleans a path into its components ("" and "/"
// are the root).
func splitPath(p string) ([]string, error) {
	if len(p) > maxPathBytes {
		return nil, wire.Errorf(wire.ErrNameTooLong, "path of %d bytes", len(p))
	}
	if strings.IndexByte(p, 0) >= 0 {
		return nil, wire.Errorf(wire.ErrInvalid, "path contains NUL")
	}
	clean := path.Clean("/" + p)
	if clean == "/" {
		return nil, nil
	}
	parts := strings.Split(clean[1:], "/")
	for _, name := range parts {
		if len(name) > maxNameBytes {
			return nil, wire.Errorf(wire.ErrNameTooLong, "name %.20q... is %d bytes", name, len(name))
		}
	}
	return parts, nil
}

func lookupChild(r kv.Reader, parent uint64, name string) (uint64, bool, error) {
	b, err := r.Get(direntKey(parent, name))
	if err != nil || b == nil {
		return 0, false, err
	}
	if len(b) != 8 {
		return 0, false, wire.Errorf(wire.ErrInternal, "directory entry %q damaged", name)
	}
	return binary.BigEndian.Uint64(b), true, nil
}

// walk resolves components from directory base (0: the root), as who
// (perm.go: search permission on every directory walked).
func walk(r kv.Reader, who *caller, base uint64, parts []string, full string) (*inodeRec, error) {
	named := base != 0
	if base == 0 {
		base = rootIno
	}
	cur, err := getInodeNoTimes(r, base)
	if err != nil {
		return nil, err
	}
	if named {
		if err := who.reachable(r, cur); err != nil {
			return nil, err
		}
	}
	for _, name := range parts {
		if cur.Type != mdsproto.TypeDir {
			return nil, wire.Errorf(wire.ErrNotDir, "%s: a component is not a directory", full)
		}
		if err := who.need(cur, permX, full); err != nil {
			return nil, err
		}
		ino, ok, err := lookupChild(r, cur.Ino, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, wire.Errorf(wire.ErrNotFound, "%s", full)
		}
		if cur, err = getInodeNoTimes(r, ino); err != nil {
			return nil, err
		}
	}
	return cur, nil
}

// resolve finds p, relative to directory base (0: the root; p is then
// absolute). Clients that hold a directory's ino (a FUSE mount) name
// entries by base and name, so a concurrent rename of an ancestor cannot
// redirect them.
func resolve(r kv.Reader, who *caller, base uint64, p string) (*inodeRec, error) {
	parts, err := splitPath(p)
	if err != nil {
		return nil, err
	}
	rec, err := walk(r, who, base, parts, p)
	if err != nil || !rec.timesUnread {
		return rec, err
	}
	return rec, readDirTimes(r, rec)
}

// resolveParent returns the directory that holds p's last component and
// that component's name; the directory without its times
// (getInodeNoTimes).
func resolveParent(r kv.Reader, who *caller, base uint64, p string) (*inodeRec, string, error) {
	parts, err := splitPath(p)
	if err != nil {
		return nil, "", err
	}
	if len(parts) == 0 {
		return nil, "", wire.Errorf(wire.ErrInvalid, "%q is the root", p)
	}
	dir, err := walk(r, who, base, parts[:len(parts)-1], p)
	if err != nil {
		return nil, "", err
	}
	if dir.Type != mdsproto.TypeDir {
		return nil, "", wire.Errorf(wire.ErrNotDir, "%s: parent is not a directory", p)
	}
	return dir, parts[len(parts)-1], nil
}

// resolveEntry resolves an existing name: its directory, its last
// component and its inode.
func resolveEntry(r kv.Reader, who *caller, base uint64, p string) (dir *inodeRec, name string, rec *inodeRec, err error) {
	if dir, name, err = resolveParent(r, who, base, p); err != nil {
		return nil, "", nil, err
	}
	if err := who.need(dir, permX, p); err != nil {
		return nil, "", nil, err
	}
	ino, ok, err := lookupChild(r, dir.Ino, name)
	if err != nil {
		return nil, "", nil, err
	}
	if !ok {
		return nil, "", nil, wire.Errorf(wire.ErrNotFound, "%s", p)
	}
	rec, err = getInode(r, ino)
	return dir, name, rec, err
}

// inheritedSpec finds the layout spec new files in dir get: the nearest
// directory default up the tree, else the cluster default.
func inheritedSpec(r kv.Reader, dir *inodeRec, clusterDefault string) (string, error) {
	for i := 0; i < maxDepth && dir != nil; i++ {
		if dir.DirLayout != "" {
			return dir.DirLayout, nil
		}
		if dir.Ino == rootIno || dir.Parent == 0 {
			break
		}
		var err error
		if dir, err = getInodeNoTimes(r, dir.Parent); err != nil {
			return "", err
		}
	}
	return clusterDefault, nil
}

// inheritedSync is the write-sync policy new files in dir get: the
// nearest ancestor's (dir included) braid.sync, or none ("").
func inheritedSync(r kv.Reader, dir *inodeRec) (string, error) {
	for i := 0; i < maxDepth && dir != nil; i++ {
		if p := dir.Xattrs[mdsproto.SyncXattr]; len(p) > 0 {
			return string(p), nil
		}
		if dir.Ino == rootIno || dir.Parent == 0 {
			break
		}
		var err error
		if dir, err = getInodeNoTimes(r, dir.Parent); err != nil {
			return "", err
		}
	}
	return "", nil
}

// inheritSync gives new file rec the write-sync policy its directory's
// files get, if any.
func inheritSync(rec *inodeRec, policy string) {
	if policy == "" {
		return
	}
	if rec.Xattrs == nil {
		rec.Xattrs = map[string][]byte{}
	}
	rec.Xattrs[mdsproto.SyncXattr] = []byte(policy)
}

// inheritedLayout is inheritedSpec parsed.
func inheritedLayout(r kv.Reader, dir *inodeRec, clusterDefault string) (layout.Spec, error) {
	text, err := inheritedSpec(r, dir, clusterDefault)
	if err != nil {
		return layout.Spec{}, err
	}
	return specOf(text)
}

func isAncestor(r kv.Reader, anc uint64, dir *inodeRec) (bool, error) {
	for i := 0; i < maxDepth; i++ {
		if dir.Ino == anc {
			return true, nil
		}
		if dir.Ino == rootIno || dir.Parent == 0 {
			return false, nil
		}
		var err error
		if dir, err = getInodeNoTimes(r, dir.Parent); err != nil {
			return false, err
		}
	}
	return false, wire.Errorf(wire.ErrInternal, "directory chain deeper than %d", maxDepth)
}

func dirEmpty(r kv.Reader, ino uint64) (bool, error) {
	empty := true
	p := direntPrefix(ino)
	err := r.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool { empty = false; return false })
	return empty, err
}

// dropLink removes one link to a file inode; when the last goes, the inode
// is deleted and its objects are queued for deletion on the OSDs.
func (s *Server) dropLink(tx kv.Txn, rec *inodeRec) error {
	if rec.Type == mdsproto.TypeDir {
		if err := tx.Delete(dirTimesKey(rec.Ino)); err != nil {
			return err
		}
		return tx.Delete(inodeKey(rec.Ino)) // never in the repair index
	}
	if rec.Nlink > 1 {
		rec.Nlink--
		rec.CtimeNs = s.cfg.Now().UnixNano()
		return putInode(tx, rec)
	}
	if kept, err := s.orphan(tx, rec); err != nil || kept {
		return err
	}
	if rec.Layout != nil {
		if err := s.gc.queueDelete(tx, rec); err != nil {
			return err
		}
	}
	return deleteInode(tx, rec.Ino)
}

func specOf(text string) (layout.Spec, error) {
	s, err := layout.Parse(text)
	if err != nil {
		return layout.Spec{}, fmt.Errorf("%w: %v", wire.ErrInvalid, err)
	}
	return s, nil
}

func toWire(l layout.Layout) *mdsproto.Layout {
	return &mdsproto.Layout{Spec: l.Spec.String(), Groups: l.Groups, OSDs: l.OSDs, Version: l.Version}
}
