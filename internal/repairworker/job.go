package repairworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/client"
	"github.com/braidfs/braid/internal/layout"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
	"github.com/braidfs/braid/internal/wire"
)

// repairJob is one assigned file being repaired.
type repairJob struct {
	c        *client.Client
	t        *mdsproto.RepairTask
	lay      layout.Layout
	cap      capability.Cap
	enc      client.Encoder
	lim      *rate.Limiter
	targets  map[int]bool
	sources  map[int]bool
	moveFrom map[int]uint32 // component → OSD it is copied from

	written  atomic.Int64
	read     atomic.Int64 // unit bytes a scrub read
	repaired atomic.Int64

	objLens map[int]int64 // sources' object lengths, as extents found them

	mu         sync.Mutex
	found      []string          // what scrub found wrong (at most mdsproto.MaxRepairFound)
	rewritten  map[int]bool      // components scrub rewrote units of
	unwritable map[int]bool      // components whose object scrub could not write: marked dirty
	boots      map[uint32]uint64 // OSD → boot that took this job's writes
	restarted  error             // an OSD took writes under two boots
}

// noteBoot records which process of OSD id took a write; writes taken by
// two processes may have lost the first one's to a power cut.
func (j *repairJob) noteBoot(id uint32, boot uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.boots == nil {
		j.boots = map[uint32]uint64{}
	}
	if prev, ok := j.boots[id]; ok && prev != boot && j.restarted == nil {
		j.restarted = fmt.Errorf("OSD %d: %w", id, client.ErrOSDRestarted)
	}
	j.boots[id] = boot
}

// checkBoot fails if the OSD whose sync answered from boot is not the
// process that took this job's writes.
func (j *repairJob) checkBoot(id uint32, boot uint64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.restarted != nil {
		return j.restarted
	}
	if prev, ok := j.boots[id]; ok && prev != boot {
		return fmt.Errorf("OSD %d: %w", id, client.ErrOSDRestarted)
	}
	return nil
}

func (j *repairJob) noteUnwritable(c int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.unwritable == nil {
		j.unwritable = map[int]bool{}
	}
	j.unwritable[c] = true
}

// markUnwritable records the components scrub could not rewrite as dirty,
// so a rebuild replaces their objects whole.
func (j *repairJob) markUnwritable(ctx context.Context) error {
	req := mdsproto.MarkDirtyReq{Ino: j.t.Inode.Ino, Version: j.lay.Version, Why: "scrub: object lost (missing, short or unusable as a whole)"}
	for c := range j.unwritable {
		req.Comps = append(req.Comps, uint32(c))
	}
	if len(req.Comps) == 0 {
		return nil
	}
	slices.Sort(req.Comps)
	return j.c.CallMDS(ctx, mdsproto.OpMarkDirty, req, nil)
}

func (j *repairJob) run(ctx context.Context) error {
	j.fence(ctx)
	if err := j.resetTargets(ctx); err != nil {
		return err
	}
	extents, err := j.extents(ctx)
	if err != nil {
		return err
	}
	w := j.lay.Spec.Width()
	U := j.lay.Spec.UnitBytes
	maps := j.dataMaps(ctx, extents)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(maxRepairStripes)
	for grp := 0; grp < j.lay.Groups; grp++ {
		if j.t.Kind == mdsproto.RepairRebuild && !j.groupHasTarget(grp, w) {
			continue
		}
		for s := int64(0); s*U < extents[grp]; s++ {
			if j.hole(maps, grp, s) {
				continue // zeros in every unit: consistent, and a hole in a rebuilt target too
			}
			n := int(min(U, extents[grp]-s*U))
			g.Go(func() error { return j.stripe(gctx, grp, s, n) })
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := j.markUnwritable(ctx); err != nil {
		return err
	}
	return j.finish(ctx, extents)
}

func (j *repairJob) groupHasTarget(grp, w int) bool {
	for c := range j.targets {
		if c/w == grp {
			return true
		}
	}
	return false
}

// osdOf is where component c is read from: its old OSD while it is being
// copied off it, else its place in the layout.
func (j *repairJob) osdOf(c int, forRead bool) uint32 {
	if id, ok := j.moveFrom[c]; ok && forRead {
		return id
	}
	return j.lay.OSDs[c]
}

func (j *repairJob) call(ctx context.Context, id uint32, op uint16, req osdproto.Req, data, resp []byte) ([]byte, error) {
	ep, ok := j.t.Endpoints[id]
	if !ok {
		return nil, wire.Errorf(wire.ErrUnavail, "OSD %d has no address", id)
	}
	req.Cap, req.Ino = j.cap, j.t.Inode.Ino
	meta, err := j.c.CallOSD(ctx, ep.Addr, op, req.Encode(op), data, resp)
	if err != nil {
		return nil, fmt.Errorf("OSD %d: %w", id, err)
	}
	return meta, nil
}

// fence raises every reachable object of the file to the repair's layout
// version (a sync at that version), so a writer still holding the old
// capability can change nothing the repair reads or writes. A source whose
// OSD cannot be fenced is not read.
func (j *repairJob) fence(ctx context.Context) {
	byOSD := map[uint32][]uint32{}
	for c, id := range j.lay.OSDs {
		byOSD[id] = append(byOSD[id], uint32(c))
	}
	for c, id := range j.moveFrom {
		byOSD[id] = append(byOSD[id], uint32(c))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, comps := range byOSD {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.call(ctx, id, osdproto.OpSync, osdproto.Req{Comps: comps}, nil, nil); err != nil {
				mu.Lock()
				defer mu.Unlock()
				for _, c := range comps {
					if j.osdOf(int(c), true) == id {
						delete(j.sources, int(c))
						delete(j.moveFrom, int(c))
					}
				}
			}
		}()
	}
	wg.Wait()
}

// resetTargets deletes what the targets of a rebuild hold where they will
// be written: every stripe of a target is written anew, and an object
// whose checksum header is damaged could be neither read nor written in
// place. (A rebuild cut short leaves the target dirty: nothing reads it.)
func (j *repairJob) resetTargets(ctx context.Context) error {
	if j.t.Kind != mdsproto.RepairRebuild {
		return nil
	}
	byOSD := map[uint32][]uint32{}
	for c := range j.targets {
		byOSD[j.lay.OSDs[c]] = append(byOSD[j.lay.OSDs[c]], uint32(c))
	}
	for id, comps := range byOSD {
		if _, err := j.call(ctx, id, osdproto.OpDelete, osdproto.Req{Comps: comps}, nil, nil); err != nil {
			return fmt.Errorf("clear targets %v on OSD %d: %w", comps, id, err)
		}
	}
	return nil
}

// extents is, per parity group, how far its objects reach: the longest
// source object (a writer that has not committed yet must not lose bytes
// it already wrote; columns past every source are zeros in all units) or
// the recorded extent, whichever is further (a source shorter than the
// record lost data and is not read as zeros), or what the committed size
// implies when no source answered.
func (j *repairJob) extents(ctx context.Context) ([]int64, error) {
	w := j.lay.Spec.Width()
	ext := make([]int64, j.lay.Groups)
	copy(ext, j.t.Inode.Extents)
	stated := make([]bool, j.lay.Groups)
	var mu sync.Mutex
	j.objLens = map[int]int64{}
	g, gctx := errgroup.WithContext(ctx)
	for c := range j.sources {
		g.Go(func() error {
			meta, err := j.call(gctx, j.osdOf(c, true), osdproto.OpStat, osdproto.Req{Comp: uint32(c)}, nil, nil)
			if err != nil {
				return nil // unreadable sources are found again when read
			}
			info, err := osdproto.DecodeObjectInfo(meta)
			if err == nil {
				mu.Lock()
				ext[c/w] = max(ext[c/w], info.Len)
				stated[c/w] = true
				j.objLens[c] = info.Len
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for c := range j.lay.OSDs {
		if !stated[c/w] {
			ext[c/w] = max(ext[c/w], j.lay.ObjectLen(j.t.Inode.Stored(), c))
		}
	}
	return ext, nil
}

// stripe repairs or scrubs the first n bytes of each unit of stripe s of
// parity group grp.
func (j *repairJob) stripe(ctx context.Context, grp int, s int64, n int) error {
	w := j.lay.Spec.Width()
	units := make([]int, w) // logical unit → component
	for u := 0; u < w; u++ {
		units[u] = grp*w + j.lay.Column(s, u)
	}
	if j.t.Kind == mdsproto.RepairScrub {
		return j.scrubStripe(ctx, s, units, n)
	}
	return j.rebuildStripe(ctx, s, units, n)
}

// readUnit reads the first len(buf) bytes of component c's unit of group
// stripe s, vouched for like a client's read: a lost unit is ErrCorrupt.
func (j *repairJob) readUnit(ctx context.Context, c int, s int64, buf []byte) error {
	req := osdproto.Req{Comp: uint32(c), Off: s * j.lay.Spec.UnitBytes, Len: uint32(len(buf))}
	meta, err := j.call(ctx, j.osdOf(c, true), osdproto.OpRead, req, nil, buf)
	if err != nil {
		return err
	}
	info, err := osdproto.ReadReply(meta)
	if err == nil {
		err = osdproto.Vouch(info, req.Off, int64(len(buf)), j.recorded(c))
	}
	if err != nil {
		return fmt.Errorf("component %d: %w", c, err)
	}
	return nil
}

// recorded is how far the MDS recorded component c's group as written.
func (j *repairJob) recorded(c int) int64 {
	if g := c / j.lay.Spec.Width(); g < len(j.t.Inode.Extents) {
		return j.t.Inode.Extents[g]
	}
	return 0
}

func (j *repairJob) writeUnit(ctx context.Context, c int, s int64, data []byte) error {
	if err := waitN(ctx, j.lim, len(data)); err != nil {
		return err
	}
	req := osdproto.Req{Comp: uint32(c), Off: s * j.lay.Spec.UnitBytes}
	id := j.osdOf(c, false)
	wr, err := osdproto.WriteReplyOf(j.call(ctx, id, osdproto.OpWrite, req, data, nil))
	if err != nil {
		return fmt.Errorf("write component %d stripe %d: %w", c, s, err)
	}
	j.noteBoot(id, wr.Boot) // a rebuild creates its targets: Created is expected
	j.written.Add(int64(len(data)))
	return nil
}

// waitN takes n tokens from lim in pieces no larger than its burst.
func waitN(ctx context.Context, lim *rate.Limiter, n int) error {
	if lim.Limit() == rate.Inf {
		return nil
	}
	for n > 0 {
		step := min(n, max(lim.Burst(), 1))
		if err := lim.WaitN(ctx, step); err != nil {
			return err
		}
		n -= step
	}
	return nil
}

// rebuildStripe writes this stripe's units of the target components:
// copied from a draining OSD where possible, else decoded from K sources.
func (j *repairJob) rebuildStripe(ctx context.Context, s int64, units []int, U int) error {
	var decode []int // logical units to decode
	for u, c := range units {
		if !j.targets[c] {
			continue
		}
		if _, ok := j.moveFrom[c]; ok {
			buf := wire.GetBuf(U)
			err := j.readUnit(ctx, c, s, buf)
			if err == nil {
				err = j.writeUnit(ctx, c, s, buf)
				wire.PutBuf(buf)
				if err != nil {
					return err
				}
				continue
			}
			wire.PutBuf(buf)
		}
		decode = append(decode, u)
	}
	if len(decode) == 0 {
		return nil
	}
	shards, err := j.readSources(ctx, s, units, decode, U)
	defer putShards(shards)
	if valid := j.validBytes(units[0]/j.lay.Spec.Width(), s); err != nil && valid < int64(U) {
		// Columns past the file's end (bytes of a writer that never
		// committed, never checked by scrub) may be what failed: the
		// file's own bytes are rebuilt without them. (The deferred
		// putShards returns this attempt's buffers: once, not here too.)
		if valid <= 0 {
			return nil
		}
		return j.rebuildStripe(ctx, s, units, int(valid))
	}
	if err != nil {
		return err
	}
	if err := j.enc.Reconstruct(shards); err != nil {
		return fmt.Errorf("%w: decode stripe %d: %v", wire.ErrUnavail, s, err)
	}
	for _, u := range decode {
		if err := j.writeUnit(ctx, units[u], s, shards[u]); err != nil {
			return err
		}
	}
	return nil
}

// validBytes is how many bytes of each unit of group stripe s hold the
// file's committed data (at most a unit; 0 or less past the end).
func (j *repairJob) validBytes(grp int, s int64) int64 {
	spec := j.lay.Spec
	visit := int64(spec.Visit)
	fs := (s/visit)*visit*int64(j.lay.Groups) + int64(grp)*visit + s%visit
	return min(j.t.Inode.Stored()-fs*spec.StripeBytes(), spec.UnitBytes)
}

// readSources reads K source units of the stripe (data units first), more
// if some fail, into pooled buffers; the others stay nil for decoding.
func (j *repairJob) readSources(ctx context.Context, s int64, units, skip []int, U int) ([][]byte, error) {
	K := j.lay.Spec.K
	shards := make([][]byte, len(units))
	var cands []int
	for u, c := range units {
		if j.sources[c] && !slices.Contains(skip, u) {
			cands = append(cands, u)
		}
	}
	// What could be read at best: every unit not being rebuilt (a target
	// is stale or on an OSD out of the cluster), whether its OSD answers
	// now or not; a failure counts against it only if the OSD said the
	// unit is lost or corrupt.
	have, can := 0, 0
	for _, c := range units {
		if _, copied := j.moveFrom[c]; !j.targets[c] || copied {
			can++
		}
	}
	var failures []error
	for len(cands) > 0 && have < K {
		n := min(K-have, len(cands))
		batch := cands[:n]
		cands = cands[n:]
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, u := range batch {
			shards[u] = wire.GetBuf(U)
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = j.readUnit(ctx, units[u], s, shards[u])
			}()
		}
		wg.Wait()
		for i, u := range batch {
			if errs[i] != nil {
				wire.PutBuf(shards[u])
				shards[u] = nil
				failures = append(failures, errs[i])
				continue
			}
			have++
		}
	}
	if have < K {
		gone := 0
		for _, err := range failures {
			if goneErr(err) {
				gone++
			}
		}
		return shards, lostOrUnavail(fmt.Errorf("%w: stripe %d: %d of %d source units readable: %w",
			wire.ErrUnavail, s, have, K, errors.Join(failures...)), units[0]/j.lay.Spec.Width(), s, gone, can, K)
	}
	return shards, nil
}

// putShards returns pooled unit buffers. Units the codec allocated are
// also returned: the pool accepts any buffer of a pooled size.
func putShards(shards [][]byte) {
	for _, b := range shards {
		if b != nil {
			wire.PutBuf(b)
		}
	}
}

// finish cuts rewritten objects to what was rebuilt (an object rewritten in
// place may hold stale bytes past it) and makes them durable.
func (j *repairJob) finish(ctx context.Context, extents []int64) error {
	w := j.lay.Spec.Width()
	byOSD := map[uint32][]uint32{}
	for c := range j.targets {
		if j.t.Kind == mdsproto.RepairRebuild {
			req := osdproto.Req{Comp: uint32(c), Off: extents[c/w]}
			if _, err := j.call(ctx, j.lay.OSDs[c], osdproto.OpTruncate, req, nil, nil); err != nil {
				return fmt.Errorf("truncate component %d: %w", c, err)
			}
		}
		byOSD[j.lay.OSDs[c]] = append(byOSD[j.lay.OSDs[c]], uint32(c))
	}
	j.mu.Lock()
	for c := range j.rewritten {
		byOSD[j.lay.OSDs[c]] = append(byOSD[j.lay.OSDs[c]], uint32(c))
	}
	j.mu.Unlock()
	for id, comps := range byOSD {
		boot, err := osdproto.BootOf(j.call(ctx, id, osdproto.OpSync, osdproto.Req{Comps: comps}, nil, nil))
		if err == nil {
			err = j.checkBoot(id, boot)
		}
		if err != nil {
			return fmt.Errorf("sync OSD %d: %w", id, err)
		}
	}
	return nil
}

// osdBlockBytes is the OSDs' checksum block (internal/osd/doc.go).
const osdBlockBytes = 4096
