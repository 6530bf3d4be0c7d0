package mds

import (
	"context"
	"time"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/kv"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/osdproto"
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
	err = s.kv.Update(ctx, func(tx kv.Txn) error {
		rec, err := resolve(tx, req.Path)
		if err != nil {
			return err
		}
		if rec.Type == mdsproto.TypeDir {
			rec.DirLayout = spec.String()
			return putInode(tx, rec)
		}
		if rec.Size != 0 {
			return wire.Errorf(wire.ErrInvalid, "%s holds data; its layout is fixed (copy it to a file with the new layout)", req.Path)
		}
		l, err := s.place(spec, -1)
		if err != nil {
			return err
		}
		if rec.Layout != nil {
			l.Version = rec.Layout.Version + 1
			if err := putJSON(tx, gcKey(rec.Ino, rec.Layout.Version), rec.Layout); err != nil {
				return err
			}
		}
		rec.Layout = toWire(l)
		return putInode(tx, rec)
	})
	if err != nil {
		return mdsproto.GetLayoutResp{}, err
	}
	return s.getLayout(ctx, mdsproto.PathReq{Path: req.Path})
}

func (s *Server) getLayout(ctx context.Context, req mdsproto.PathReq) (mdsproto.GetLayoutResp, error) {
	var out mdsproto.GetLayoutResp
	err := s.kv.View(ctx, func(r kv.Reader) error {
		rec, err := resolve(r, req.Path)
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
	out := mdsproto.StatusResp{ClusterID: s.cl.ID, DefaultLayout: s.cl.DefaultLayout, OSDs: s.cluster.status(s.cfg.Now())}
	for _, o := range out.OSDs {
		out.CapacityBytes += o.CapacityBytes
		out.UsedBytes += o.UsedBytes
	}
	err := s.kv.View(ctx, func(r kv.Reader) error {
		var ferr error
		err := r.Scan([]byte{'i'}, []byte{'j'}, func(k, v []byte) bool {
			var rec inodeRec
			if ferr = jsonUnmarshal(v, &rec); ferr != nil {
				return false
			}
			if rec.Type == mdsproto.TypeDir {
				out.Dirs++
			} else {
				out.Files++
				out.LogicalBytes += rec.Size
			}
			return true
		})
		if err != nil {
			return err
		}
		return ferr
	})
	return out, err
}

// gcLoop deletes the objects of removed files from their OSDs. Records
// stay until every OSD holding a component has confirmed, so an OSD that
// is down when a file is removed is cleaned when it returns.
func (s *Server) gcLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.GCEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.gcPass(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Log.Warn("object deletion pass", "err", err)
		}
	}
}

type gcItem struct {
	key []byte
	ino uint64
	l   mdsproto.Layout
}

func (s *Server) gcPass(ctx context.Context) error {
	var items []gcItem
	err := s.kv.View(ctx, func(r kv.Reader) error {
		return r.Scan([]byte{'g'}, []byte{'h'}, func(k, v []byte) bool {
			var it gcItem
			if len(k) == 17 && jsonUnmarshal(v, &it.l) == nil {
				it.key = append([]byte(nil), k...)
				it.ino = beUint64(k[1:9])
				items = append(items, it)
			}
			return len(items) < gcBatch
		})
	})
	if err != nil {
		return err
	}
	for _, it := range items {
		if s.deleteObjects(ctx, it) {
			if err := s.kv.Update(ctx, func(tx kv.Txn) error { return tx.Delete(it.key) }); err != nil {
				return err
			}
		}
	}
	return nil
}

func beUint64(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}

// deleteObjects asks each OSD of the layout to drop its components and
// reports whether all confirmed.
func (s *Server) deleteObjects(ctx context.Context, it gcItem) bool {
	byOSD := map[uint32][]uint32{}
	for comp, id := range it.l.OSDs {
		byOSD[id] = append(byOSD[id], uint32(comp))
	}
	now := s.cfg.Now()
	c := s.cfg.Key.Issue(it.ino, capability.Write, it.l.Version, now.Add(time.Minute))
	done := true
	for id, comps := range byOSD {
		ep, ok := s.cluster.endpoint(id, now)
		if !ok || !ep.Up {
			done = false
			continue
		}
		req := osdproto.Req{Cap: c, Ino: it.ino, Comps: comps}
		cctx, cancel := context.WithTimeout(ctx, osdCallTimeout)
		conn, err := s.osds.Get(cctx, ep.Addr)
		if err == nil {
			_, _, err = conn.Call(cctx, osdproto.OpDelete, req.Encode(osdproto.OpDelete), nil, nil)
		}
		cancel()
		if err != nil {
			done = false
		}
	}
	return done
}
