package s3gw

import (
	"container/heap"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/versity/versitygw/s3err"
	"github.com/versity/versitygw/s3response"

	"github.com/braidfs/braid"
)

func timeOf(ns int64) time.Time { return time.Unix(0, ns).UTC() }

const maxListKeys = 1000 // S3's page limit

// listItem is one key of a listing: an object, or with a delimiter a
// common prefix.
type listItem struct {
	key    string
	prefix bool
	inode  braid.Attr
	meta   []byte // the file's metaXattr, nil if it has none
}

// listing is the result of one page.
type listing struct {
	objects   []listItem
	prefixes  []string
	truncated bool
	last      string // the last key or prefix returned: where the next page starts
}

// list walks bucket's keys after marker in S3 order, rolling keys up to
// common prefixes at delimiter, and returns up to maxKeys of them.
func (b *braidBackend) list(ctx context.Context, bucket, prefix, delimiter, marker string, maxKeys int) (listing, error) {
	var out listing
	fi, err := b.bucketDir(ctx, bucket)
	if err != nil {
		return out, err
	}
	if maxKeys < 0 || maxKeys > maxListKeys {
		maxKeys = maxListKeys
	}
	if maxKeys == 0 {
		return out, nil
	}
	// Start in the deepest directory the prefix names whole.
	w := &walker{b: b, ctx: ctx, prefix: prefix, descend: delimiter != "/"}
	base := &dirIter{ino: fi.Ino, more: true}
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		// The prefix's directories are checked as a key's are: "..", "."
		// or the reserved directory would lead the walk outside the
		// bucket's keys (the MDS cleans paths).
		dir, _, err := objectPath(bucket, prefix[:i+1])
		if err != nil {
			return out, nil // no key can have this prefix
		}
		d, err := b.cl.Stat(ctx, dir)
		if err != nil || !d.IsDir {
			return out, nil // no such directory: no keys
		}
		base.base, base.ino = prefix[:i+1], d.Ino
		base.self = &listItem{key: base.base, prefix: true, inode: braid.Attr{Ino: d.Ino, Type: braid.TypeDir, MtimeNs: d.ModTime.UnixNano()}}
	}
	if marker > prefix && strings.HasPrefix(marker, base.base) {
		// Resume at the marker rather than read the keys before it.
		base.self = nil // sorts before the marker
		if err := w.resume(base, strings.TrimPrefix(marker, base.base)); err != nil {
			return out, err
		}
	} else {
		w.stack = append(w.stack, base)
	}
	for {
		it, ok, err := w.next()
		if err != nil {
			return out, err
		}
		if !ok {
			return out, nil
		}
		if !strings.HasPrefix(it.key, prefix) {
			if it.key > prefix && !strings.HasPrefix(prefix, it.key) {
				return out, nil // past every key with the prefix
			}
			continue
		}
		if marker != "" && it.key <= marker {
			continue
		}
		key := it.key
		if delimiter != "" {
			if i := strings.Index(key[len(prefix):], delimiter); i >= 0 {
				cp := key[:len(prefix)+i+len(delimiter)]
				if cp == out.last || marker != "" && cp <= marker {
					continue
				}
				if len(out.objects)+len(out.prefixes) == maxKeys {
					out.truncated = true
					return out, nil
				}
				out.prefixes = append(out.prefixes, cp)
				out.last = cp
				continue
			}
		}
		if len(out.objects)+len(out.prefixes) == maxKeys {
			out.truncated = true
			return out, nil
		}
		out.objects = append(out.objects, it)
		out.last = key
	}
}

// walker yields a bucket's keys in S3 order: a depth-first walk in which
// each directory's entries are sorted with subdirectories as "name/".
type walker struct {
	b       *braidBackend
	ctx     context.Context
	prefix  string
	descend bool // false: a directory is yielded as "dir/" and not entered
	stack   []*dirIter
}

// dirIter yields one directory's entries in S3 order from a stream in
// name order: an entry waits in a heap until no later name can sort
// before it (a directory "d" sorts as "d/", after "d-x" and "d.x").
type dirIter struct {
	base    string // key prefix of the directory's entries ("" or "a/b/")
	ino     uint64
	after   string // names fetched so far
	more    bool
	fetched bool // a page was read
	empty   bool // the directory has no entries at all
	self    *listItem
	ready   itemHeap
	page    []braid.DirEntry
}

// resume starts listing directory d after key rel (relative to d). A
// directory named by a prefix of rel that sorts after rel ("a" for rel
// "a-b") is looked up, as the name order puts it before the resume point.
func (w *walker) resume(d *dirIter, rel string) error {
	head, rest, nested := strings.Cut(rel, "/")
	d.after = head
	if err := w.considerPrefixDirs(d, head, !nested); err != nil {
		return err
	}
	w.stack = append(w.stack, d)
	if !nested || rest == "" || !w.descend || len(w.stack) > maxKeyBytes || !keyName(head) {
		return nil
	}
	// Resume inside head too, if it is a directory.
	a, err := w.b.cl.LookupAt(w.ctx, d.ino, head)
	if err != nil || a.Type != braid.TypeDir {
		return nil //nolint:nilerr // no such directory: nothing of it to list
	}
	return w.resume(&dirIter{base: d.base + head + "/", ino: a.Ino, more: true}, rest)
}

// considerPrefixDirs queues directories whose names are proper prefixes
// of head followed by a byte below '/', and with self head itself: they
// sort after head as "name/" but come before it in name order.
func (w *walker) considerPrefixDirs(d *dirIter, head string, self bool) error {
	for i := 1; i <= min(len(head), maxNameBytes); i++ { // no longer name can exist
		if i == len(head) && !self || i < len(head) && head[i] >= '/' || !keyName(head[:i]) {
			continue
		}
		a, err := w.b.cl.LookupAt(w.ctx, d.ino, head[:i])
		if errors.Is(err, braid.ErrNotFound) {
			continue
		}
		if err != nil {
			return s3Error(err, s3err.ErrNoSuchKey)
		}
		if a.Type == braid.TypeDir {
			heap.Push(&d.ready, listItem{key: d.base + head[:i] + "/", prefix: true, inode: a})
		}
	}
	return nil
}

// next yields the next key.
func (w *walker) next() (listItem, bool, error) {
	for len(w.stack) > 0 {
		d := w.stack[len(w.stack)-1]
		it, ok, err := w.nextIn(d)
		if err != nil {
			return listItem{}, false, err
		}
		if !ok {
			w.stack = w.stack[:len(w.stack)-1]
			if d.empty && d.self != nil {
				return *d.self, true, nil // an empty directory is its own "dir/" key
			}
			continue
		}
		if it.prefix && w.descend && len(w.stack) <= maxKeyBytes {
			self := it
			w.stack = append(w.stack, &dirIter{base: it.key, ino: it.inode.Ino, more: true, self: &self})
			continue
		}
		return it, true, nil
	}
	return listItem{}, false, nil
}

func (w *walker) nextIn(d *dirIter) (listItem, bool, error) {
	for {
		if len(d.page) == 0 && d.more {
			ents, more, err := w.b.cl.ReadDirXattrAt(w.ctx, d.ino, d.after, listPage, metaXattr)
			if errors.Is(err, braid.ErrNotFound) {
				ents, more = nil, false // removed while listed
			} else if err != nil {
				return listItem{}, false, s3Error(err, s3err.ErrNoSuchKey)
			}
			d.empty = !d.fetched && d.after == "" && len(ents) == 0
			d.fetched = true
			d.page, d.more = ents, more && len(ents) > 0
		}
		if len(d.page) == 0 {
			if d.ready.Len() == 0 {
				return listItem{}, false, nil
			}
			return heap.Pop(&d.ready).(listItem), true, nil
		}
		e := d.page[0]
		// Everything queued that sorts before this name goes first: no
		// later name can sort before it.
		if d.ready.Len() > 0 && d.ready[0].key < d.base+e.Name {
			return heap.Pop(&d.ready).(listItem), true, nil
		}
		d.page = d.page[1:]
		d.after = e.Name
		if d.base == "" && e.Name == reservedDir {
			continue
		}
		it := listItem{key: d.base + e.Name, inode: e.Inode, meta: e.Xattr}
		switch e.Inode.Type {
		case braid.TypeDir:
			it.key += "/"
			it.prefix = true
		case braid.TypeFile:
		default:
			continue // symlinks and others are not objects
		}
		if !w.mayMatch(it.key) {
			continue
		}
		heap.Push(&d.ready, it)
	}
}

// mayMatch reports whether key or keys below it can have the prefix.
func (w *walker) mayMatch(key string) bool {
	return strings.HasPrefix(key, w.prefix) || strings.HasPrefix(w.prefix, key)
}

type itemHeap []listItem

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].key < h[j].key }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(listItem)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// object is the listing entry of a file, with its ETag (from the metadata
// the listing brought: no request an object).
func (b *braidBackend) object(it listItem) s3response.Object {
	size := it.inode.Size
	mtime := timeOf(it.inode.MtimeNs)
	etag := quote(emptyMD5)
	if !it.prefix {
		etag = settledInfo(it.inode.Ino, size, it.inode.MtimeNs, it.meta).meta.ETag
	}
	return s3response.Object{Key: ptr(it.key), Size: &size, LastModified: &mtime, ETag: ptr(etag), StorageClass: types.ObjectStorageClassStandard}
}

// entries renders a page in S3's shapes.
func (b *braidBackend) entries(ctx context.Context, l listing) ([]s3response.Object, []types.CommonPrefix) {
	objs := make([]s3response.Object, 0, len(l.objects))
	for _, it := range l.objects {
		objs = append(objs, b.object(it))
	}
	cps := make([]types.CommonPrefix, 0, len(l.prefixes))
	for _, p := range l.prefixes {
		cps = append(cps, types.CommonPrefix{Prefix: ptr(p)})
	}
	return objs, cps
}

func (b *braidBackend) ListObjectsV2(rctx context.Context, in *s3.ListObjectsV2Input) (s3response.ListObjectsV2Result, error) {
	ctx := b.opCtx(rctx)
	bucket, prefix, delim := str(in.Bucket), str(in.Prefix), str(in.Delimiter)
	marker := str(in.StartAfter)
	if tok := str(in.ContinuationToken); tok != "" {
		k, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return s3response.ListObjectsV2Result{}, invalidArgument("continuation token %q is not one this gateway gave", tok)
		}
		marker = string(k)
	}
	maxKeys := maxListKeys
	if in.MaxKeys != nil {
		maxKeys = int(*in.MaxKeys)
	}
	l, err := b.list(ctx, bucket, prefix, delim, marker, maxKeys)
	if err != nil {
		return s3response.ListObjectsV2Result{}, err
	}
	out := s3response.ListObjectsV2Result{Name: &bucket, Prefix: &prefix, Delimiter: in.Delimiter, StartAfter: in.StartAfter,
		ContinuationToken: in.ContinuationToken, MaxKeys: ptr(int32(maxKeys)), IsTruncated: ptr(l.truncated),
		KeyCount: ptr(int32(len(l.objects) + len(l.prefixes)))}
	out.Contents, out.CommonPrefixes = b.entries(ctx, l)
	if l.truncated {
		out.NextContinuationToken = ptr(base64.RawURLEncoding.EncodeToString([]byte(l.last)))
	}
	return out, nil
}

func (b *braidBackend) ListObjects(rctx context.Context, in *s3.ListObjectsInput) (s3response.ListObjectsResult, error) {
	ctx := b.opCtx(rctx)
	bucket, prefix, delim, marker := str(in.Bucket), str(in.Prefix), str(in.Delimiter), str(in.Marker)
	maxKeys := maxListKeys
	if in.MaxKeys != nil {
		maxKeys = int(*in.MaxKeys)
	}
	l, err := b.list(ctx, bucket, prefix, delim, marker, maxKeys)
	if err != nil {
		return s3response.ListObjectsResult{}, err
	}
	out := s3response.ListObjectsResult{Name: &bucket, Prefix: &prefix, Delimiter: in.Delimiter, Marker: in.Marker,
		MaxKeys: ptr(int32(maxKeys)), IsTruncated: ptr(l.truncated)}
	out.Contents, out.CommonPrefixes = b.entries(ctx, l)
	if l.truncated && delim != "" {
		out.NextMarker = ptr(l.last) // S3 gives NextMarker only with a delimiter
	}
	return out, nil
}
