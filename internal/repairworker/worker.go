package repairworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/braidfs/braid/internal/capability"
	"github.com/braidfs/braid/internal/client"
	"github.com/braidfs/braid/internal/mdsproto"
	"github.com/braidfs/braid/internal/wire"
)

// Options configure a repair worker.
type Options struct {
	Workers int    // files repaired at once; default 4
	Name    string // shown in the MDS's log
	// Process, for repair workers an MDS process runs, is that process's name:
	// the leader ends their assignments when it leaves the cluster (dies)
	// instead of after the repair lease.
	Process string
	Poll    time.Duration // wait between assignments while there is no work; default 500ms
}

// Serve serves the cluster's repair queue through c until ctx ends: it
// is assigned files by the MDS and rebuilds lost components, catches up
// components that missed writes, moves components off draining OSDs and
// scrubs. The MDS runs repair workers itself; more on other nodes add
// repair bandwidth.
func Serve(ctx context.Context, c *client.Client, o Options) error {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	h := &worker{c: c, opts: o, repairLim: rate.NewLimiter(rate.Inf, 0), scrubLim: rate.NewLimiter(rate.Inf, 0)}
	var wg sync.WaitGroup
	for i := 0; i < o.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.work(ctx, fmt.Sprintf("%s/%d", o.Name, i))
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// worker holds what a worker's goroutines share: the rate limits, one for
// repair writes and one for scrub reads, across all workers.
type worker struct {
	c         *client.Client
	opts      Options
	repairLim *rate.Limiter
	scrubLim  *rate.Limiter
}

// maxRepairStripes bounds the stripes of one file repaired at once.
const maxRepairStripes = 4

func (h *worker) work(ctx context.Context, name string) {
	for ctx.Err() == nil {
		var t mdsproto.RepairTask
		err := h.c.CallMDS(ctx, mdsproto.OpRepairAssign, mdsproto.RepairAssignReq{Worker: name, Process: h.opts.Process}, &t)
		if err != nil || t.Kind == "" {
			client.Pause(ctx, h.opts.Poll)
			continue
		}
		res := h.run(ctx, &t)
		if ctx.Err() != nil {
			h.interrupted(ctx, res)
			return
		}
		for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
			if err := h.c.CallMDS(ctx, mdsproto.OpRepairDone, res, nil); err == nil || !client.IsConnError(err) {
				break
			}
			client.Pause(ctx, h.opts.Poll)
		}
	}
}

// interrupted tells the MDS, once and briefly, that an assignment ends
// unfinished because the worker is stopping: the file is assigned again
// at once rather than after its lock's lease, and the MDS does not count
// it a failure. What the cut-off job read proves nothing about the file.
func (h *worker) interrupted(ctx context.Context, res mdsproto.RepairDoneReq) {
	res.Err, res.Lost, res.Found = mdsproto.RepairInterrupted, "", nil
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptedReportTimeout)
	defer cancel()
	_ = h.c.CallMDS(dctx, mdsproto.OpRepairDone, res, nil)
}

// interruptedReportTimeout bounds a stopping worker's last report.
const interruptedReportTimeout = 2 * time.Second

func (h *worker) run(ctx context.Context, t *mdsproto.RepairTask) mdsproto.RepairDoneReq {
	res := mdsproto.RepairDoneReq{Ino: t.Inode.Ino, Kind: t.Kind, Comps: t.Comps}
	if t.Inode.Layout != nil {
		res.Version = t.Inode.Layout.Version
	}
	j, err := h.newJob(t)
	if err == nil {
		err = j.run(ctx)
		res.Bytes, res.Read, res.Repaired = j.written.Load(), j.read.Load(), j.repaired.Load()
		for c := range j.sources {
			res.Sources = append(res.Sources, uint32(c))
		}
		slices.Sort(res.Sources)
	}
	if err != nil {
		res.Err = err.Error()
		var lost *stripeLost
		if errors.As(err, &lost) {
			res.Lost = lost.what
		}
	}
	if j != nil {
		j.mu.Lock()
		res.Found = slices.Clone(j.found)
		j.mu.Unlock()
	}
	return res
}

func (h *worker) newJob(t *mdsproto.RepairTask) (*repairJob, error) {
	if t.Inode.Layout == nil {
		return nil, wire.Errorf(wire.ErrInvalid, "repair task without a layout")
	}
	lay, err := t.Inode.Layout.Decode()
	if err != nil {
		return nil, err
	}
	cp, err := capability.Decode(t.Cap)
	if err != nil {
		return nil, err
	}
	enc, err := h.c.NewEncoder(lay.Spec)
	if err != nil {
		return nil, err
	}
	j := &repairJob{c: h.c, t: t, lay: lay, cap: cp, enc: enc, lim: h.repairLim,
		targets: map[int]bool{}, sources: map[int]bool{}, moveFrom: map[int]uint32{}}
	if t.Kind == mdsproto.RepairScrub {
		j.lim = h.scrubLim
	}
	if t.RateBytesPerS > 0 && j.lim.Limit() != rate.Limit(t.RateBytesPerS) {
		j.lim.SetLimit(rate.Limit(t.RateBytesPerS))
		j.lim.SetBurst(int(min(t.RateBytesPerS, 64<<20)))
	}
	n := len(lay.OSDs)
	for _, c := range t.Comps {
		if int(c) >= n {
			return nil, wire.Errorf(wire.ErrInvalid, "component %d out of range", c)
		}
		j.targets[int(c)] = true
	}
	for _, c := range t.Sources {
		if int(c) < n {
			j.sources[int(c)] = true
		}
	}
	for c, id := range t.MoveFrom {
		if int(c) < n {
			j.moveFrom[int(c)] = id
		}
	}
	return j, nil
}
