package mds

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/gc"
	"github.com/braidfs/braid/internal/core/repair"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// setLayout sets a directory's default layout, or re-places an empty file.
// A spec wider than the cluster is refused here, not at the first write.
func (s *Server) setLayout(ctx context.Context, req mdsproto.SetLayoutReq) (mdsproto.GetLayoutResp, error) {
	spec, err := specOf(req.Spec)
	if err != nil {
		return mdsproto.GetLayoutResp{}, err
	}
	if n := s.cluster.known(); spec.Width() > n {
		return mdsproto.GetLayoutResp{}, wire.Errorf(wire.ErrInvalid, "layout %s needs %d OSDs, cluster has %d", spec, spec.Width(), n)
	}
	err = s.mutate(ctx, func(tx kv.Txn) error {
		rec, err := resolve(tx, whoOf(ctx), req.Dir, req.Path)
		if err != nil {
			return err
		}
		if !whoOf(ctx).owns(rec) {
			return wire.Errorf(wire.ErrPerm, "%s: only its owner sets its layout", req.Path)
		}
		if rec.Ino == rootIno {
			// The root's layout is every new file's default.
			if err := requireRole(ctx, rAdmins, "set the layout of /"); err != nil {
				return err
			}
		}
		switch rec.Type {
		case mdsproto.TypeDir:
			rec.DirLayout = spec.String()
			return putInode(tx, rec)
		case mdsproto.TypeFile:
		default:
			return wire.Errorf(wire.ErrInvalid, "%s is a %s, which holds no data and has no layout", req.Path, rec.Type)
		}
		if rec.Stored() != 0 {
			return wire.Errorf(wire.ErrInvalid, "%s holds data; its layout is fixed (copy it to a file with the new layout)", req.Path)
		}
		l, err := s.place(spec, -1)
		if err != nil {
			return err
		}
		if rec.Layout != nil {
			l.Version = rec.Layout.Version + 1
			if err := s.gc.queueDelete(tx, rec); err != nil {
				return err
			}
		}
		rec.Layout = toWire(l)
		rec.Base, rec.Dirty, rec.Extents = l.Version, nil, nil
		s.fkeys.sealNew(rec, l.Spec)
		return putInode(tx, rec)
	})
	if err != nil {
		return mdsproto.GetLayoutResp{}, err
	}
	if fi, err := s.lookup(ctx, mdsproto.PathReq{Path: req.Path, Dir: req.Dir}); err == nil && fi.Type == mdsproto.TypeFile {
		s.labels.queue(fi.Ino)
	}
	return s.getLayout(ctx, mdsproto.PathReq{Path: req.Path, Dir: req.Dir})
}

func (s *Server) getLayout(ctx context.Context, req mdsproto.PathReq) (mdsproto.GetLayoutResp, error) {
	var out mdsproto.GetLayoutResp
	err := s.kv.View(ctx, func(r kv.Reader) error {
		rec, err := resolve(r, whoOf(ctx), req.Dir, req.Path)
		if err != nil {
			return err
		}
		if rec.Type == mdsproto.TypeFile && rec.Layout != nil {
			out = mdsproto.GetLayoutResp{Spec: rec.Layout.Spec, Explicit: true, Layout: rec.Layout}
			return nil
		}
		out.Explicit = rec.DirLayout != ""
		out.Spec, err = inheritedSpec(r, rec, s.cl.DefaultLayout)
		return err
	})
	if err == nil && !out.Explicit {
		if spec, perr := specOf(out.Spec); perr == nil {
			out.Spec = spec.String()
		}
	}
	return out, err
}

func (s *Server) status(ctx context.Context) (mdsproto.StatusResp, error) {
	now := s.cfg.Now()
	out := mdsproto.StatusResp{ClusterID: s.cl.ID, DefaultLayout: s.cl.DefaultLayout, OSDs: s.cluster.status(now)}
	out.CapacityBytes, out.UsedBytes, _ = mdsproto.SumCapacity(out.OSDs)
	h := healthScan{views: s.cluster.views(now), repairActive: s.sights.repairActive, comps: map[uint32]int64{}}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		var ferr error
		err := r.Scan(firstKey(pInode), pastKeys(pInode), func(k, v []byte) bool {
			var rec inodeRec
			if ferr = decodeRecord(v, &rec); ferr != nil {
				return false
			}
			if rec.Type == mdsproto.TypeDir {
				out.Dirs++
			} else {
				out.Files++
				out.LogicalBytes += rec.Size
				h.add(&rec, now)
				if rec.Nlink == 0 && rec.Layout != nil {
					out.PendingDelete.OpenBytes += layoutBytes(&rec, allComps(rec.Layout))
				}
			}
			return true
		})
		if err != nil {
			return err
		}
		if ferr != nil {
			return ferr
		}
		if err := r.Scan(firstKey(pGC), pastKeys(pGC), func(k, v []byte) bool {
			var g gcRec
			if decodeRecord(v, &g) == nil {
				out.PendingDelete.Objects += int64(len(g.Comps))
				out.PendingDelete.Bytes += g.Bytes
				at := s.sights.deadline(sightDelete, k, g.NotBeforeNs, s.cfg.DeleteDelay)
				if next := &out.PendingDelete.NextNs; *next == 0 || at < *next {
					*next = at
				}
				out.PendingDelete.LastNs = max(out.PendingDelete.LastNs, at)
			}
			return true
		}); err != nil {
			return err
		}
		if out.LostCount, out.LostFiles, err = lostFiles(r, h.lost); err != nil {
			return err
		}
		return r.Scan(firstKey(pIntent), pastKeys(pIntent), func(k, v []byte) bool { out.Intents++; return true })
	})
	s.repairs.mu.Lock()
	for i := range out.OSDs {
		out.OSDs[i].Components = h.comps[out.OSDs[i].ID]
		out.OSDs[i].LayoutBytes = s.repairs.bal.est[out.OSDs[i].ID]
	}
	s.repairs.mu.Unlock()
	out.Health, out.Problems = h.summary(out.OSDs)
	if out.LostCount > 0 {
		out.Health = mdsproto.HealthLost
		out.Problems = append([]string{lostProblem(out.LostCount, out.LostFiles)}, out.Problems...)
	}
	if p := fullProblem(out.OSDs, out.PendingDelete, now); p != "" {
		out.Problems = append(out.Problems, p)
	}
	s.repairs.mu.Lock()
	out.FileEvents = slices.Clone(s.repairs.events)
	if n := len(s.repairs.noSpace); n > 0 {
		out.Problems = append(out.Problems, fmt.Sprintf("%d files wait for repair because OSDs are out of space (retried every %v; add capacity or remove files)", n, repairBackoff))
	}
	s.repairs.mu.Unlock()
	out.LabelsPending = s.labels.pending()
	out.Writers = s.leases.writers()
	out.Repair = s.repairs.progress(h, now)
	_, _, _, out.Repair.Balancing = s.repairs.balanceTarget(h.views)
	out.Meta = s.metaStatus(ctx)
	out.Meta.Routing = s.router.routing()
	for _, m := range out.Meta.Members {
		if m.Error != "" {
			out.Problems = append(out.Problems, fmt.Sprintf("etcd member %s (%s): %s", m.Name, m.Endpoint, m.Error))
		}
	}
	return out, err
}

// metaStatus describes the metadata service: Config.MetaStatus's answer,
// or this process alone on its embedded store.
func (s *Server) metaStatus(ctx context.Context) mdsproto.MetaStatus {
	if s.cfg.MetaStatus != nil {
		return s.cfg.MetaStatus(ctx)
	}
	host, _ := os.Hostname()
	return mdsproto.MetaStatus{Engine: "embedded", MDS: []mdsproto.MDSProcess{
		{Name: host, Addr: s.Addr(), Pid: os.Getpid(), Host: host, Role: "active", StartedNs: s.started.UnixNano()}}}
}

// healthScan accumulates what status reports about redundancy.
type healthScan struct {
	views                              map[uint32]cluster.View
	repairActive                       func(ino uint64, l *repairLock, now time.Time) bool // Server.repairActive
	comps                              map[uint32]int64                                    // components per OSD
	degraded, waiting, dirty, crowded  int64
	unrepairable, repairing, filesLeft int64
	bytesLeft                          int64
	why                                string
	// lost are the files whose plan says they cannot be read (not
	// counted above); the caller names them.
	lost []mdsproto.LostFile
}

func (h *healthScan) add(rec *inodeRec, now time.Time) {
	if rec.Layout == nil {
		return
	}
	for _, id := range rec.Layout.OSDs {
		h.comps[id]++
	}
	if rec.Unnamed || rec.Nlink == 0 {
		// Not a file anyone can name: an Atomic create not published
		// (a failed put), or unlinked while open. Its objects await
		// deletion; what they miss harms no one.
		return
	}
	spec, err := specOf(rec.Layout.Spec)
	if err != nil {
		return
	}
	p := repair.Plan(rec.Layout.OSDs, rec.Dirty, h.views, spec)
	if len(p.Crowded) > 0 {
		h.crowded++
	}
	if p.Degraded() {
		h.degraded++
	}
	if len(p.Waiting) > 0 {
		h.waiting++
	}
	if len(rec.Dirty) > 0 {
		h.dirty++
	}
	repairing := h.repairActive(rec.Ino, rec.Repair, now)
	if repairing {
		h.repairing++
	}
	if p.Lost && !repairing {
		h.lost = append(h.lost, mdsproto.LostFile{Ino: rec.Ino, Why: p.LostWhy})
		return
	}
	if p.Unrepairable {
		h.unrepairable++
		h.why = p.Why
		return
	}
	if len(p.Rewrite) > 0 {
		h.filesLeft++
		l, err := rec.Layout.Decode()
		if err == nil {
			for _, c := range p.Rewrite {
				h.bytesLeft += componentBytes(rec, l, c)
			}
		}
	}
}

// summary turns the scan into a health value and what is wrong.
func (h *healthScan) summary(osds []mdsproto.OSDStatus) (string, []string) {
	var problems []string
	for _, o := range osds {
		if o.State != mdsproto.StateUp && o.Components > 0 {
			problems = append(problems, fmt.Sprintf("OSD %d is %s; it holds %d components", o.ID, o.State, o.Components))
		}
		if o.Draining && o.Components > 0 {
			problems = append(problems, fmt.Sprintf("OSD %d is draining; %d components left on it", o.ID, o.Components))
		}
	}
	if h.waiting > 0 {
		problems = append(problems, fmt.Sprintf("%d files have components on down OSDs (rebuilt if they stay down)", h.waiting))
	}
	if h.dirty > 0 {
		problems = append(problems, fmt.Sprintf("%d files have components that missed writes or are being rebuilt", h.dirty))
	}
	if h.unrepairable > 0 {
		problems = append(problems, fmt.Sprintf("%d files cannot be repaired now (%s)", h.unrepairable, h.why))
	}
	if h.crowded > 0 {
		problems = append(problems, fmt.Sprintf("note: %d files keep two components of a parity group on one OSD (too few OSDs up); they move apart when OSDs are added", h.crowded))
	}
	if h.degraded > 0 {
		return mdsproto.HealthDegraded, problems
	}
	return mdsproto.HealthOK, problems
}

func (q *repairQueue) progress(h healthScan, now time.Time) mdsproto.RepairProgress {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.stats
	p.FilesLeft, p.BytesLeft, p.Unrepairable = h.filesLeft, h.bytesLeft, h.unrepairable
	p.ActiveRebuild, p.ActiveScrub, p.ActiveBalance = q.activeKinds(now)
	p.Active = p.ActiveRebuild + p.ActiveScrub + p.ActiveBalance
	p.RateBytesPerS = q.rate(now)
	p.ScrubRateBytesPerS = q.scrubRate(now)
	if p.RateBytesPerS > 0 {
		p.ETASeconds = float64(p.BytesLeft) / p.RateBytesPerS
	}
	p.ScrubQueued = int64(len(q.scrubQ))
	p.RecentErrors = append([]string(nil), q.errs...)
	p.RecentRepairs = append([]string(nil), q.recent...)
	return p
}

// gcRec is a removed file's (or replaced layout's) objects awaiting
// deletion, keyed g<ino><layout version> (internal/core/gc).
type gcRec = gc.Record

func allComps(l *mdsproto.Layout) []uint32 {
	out := make([]uint32, len(l.OSDs))
	for c := range out {
		out[c] = uint32(c)
	}
	return out
}

// layoutBytes estimates the data rec's components comps hold.
func layoutBytes(rec *inodeRec, comps []uint32) int64 {
	l, err := rec.Layout.Decode()
	if err != nil {
		return 0
	}
	var n int64
	for _, c := range comps {
		n += componentBytes(rec, l, int(c))
	}
	return n
}

// gcLoop deletes the objects of removed files from their OSDs. A record
// shrinks as OSDs confirm and goes when the last has, so an OSD that is
// down when a file is removed is cleaned when it returns.
func (s *Server) gcLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.GCEvery)
	defer t.Stop()
	var cursor, onceCursor []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.router.leading() {
			continue // the leader's duty
		}
		next, err := s.gc.pass(ctx, cursor)
		if err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("object deletion pass", "err", err)
		}
		cursor = next
		if onceCursor, err = s.sweepOnce(ctx, onceCursor); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("mutation record sweep", "err", err)
		}
	}
}

// fullFreeFraction: an OSD with less than this of its capacity free is
// full (its next writes fail with ENOSPC).
const fullFreeFraction = 0.05

// fullProblem says which up OSDs are full, and, when removed files or
// failed writes hold space awaiting deletion (their objects outlive them
// by the delete delay, for handles that may still read them), how much
// and when it frees: what a writer refused ENOSPC wants to know.
func fullProblem(osds []mdsproto.OSDStatus, pd mdsproto.PendingDelete, now time.Time) string {
	var full []string
	for _, o := range osds {
		if o.State == mdsproto.StateUp && o.CapacityBytes > 0 && float64(o.FreeBytes) < fullFreeFraction*float64(o.CapacityBytes) {
			full = append(full, strconv.FormatUint(uint64(o.ID), 10))
		}
	}
	if len(full) == 0 {
		return ""
	}
	msg := fmt.Sprintf("OSDs %s are full (under %.0f%% free): writes placed on them fail with ENOSPC; add OSDs or remove files",
		strings.Join(full, ", "), 100*fullFreeFraction)
	if pd.Bytes > 0 {
		at := func(ns int64) string {
			t := time.Unix(0, ns)
			return fmt.Sprintf("%s (in %v)", t.Format(time.TimeOnly), max(0, t.Sub(now)).Round(time.Second))
		}
		msg += fmt.Sprintf("; %d bytes of removed files and failed writes are awaiting deletion, freed from %s, all by %s",
			pd.Bytes, at(pd.NextNs), at(pd.LastNs))
	}
	return msg
}

// defaultLayout is the cluster's layout for files whose directories
// name none.
func (s *Server) defaultLayout() string { return s.cl.DefaultLayout }
