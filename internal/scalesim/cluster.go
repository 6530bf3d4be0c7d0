package scalesim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/braidfs/braid/internal/core/cluster"
	"github.com/braidfs/braid/internal/core/placement"
	"github.com/braidfs/braid/internal/layout"
)

// Config is the simulated cluster, its files and its failures.
type Config struct {
	Racks, HostsPerRack, OSDsPerHost int
	OSDBytes                         int64   // each OSD's capacity
	OSDBandwidth                     float64 // bytes/s an OSD gives rebuild (reads and writes together)
	SlowFraction, SlowFactor         float64 // a fraction of OSDs run at SlowFactor of the bandwidth
	Files                            int64   // files the cluster holds
	SampleFiles                      int     // files placed for real, each standing for Files/SampleFiles
	Layouts                          []string
	DiskAFR, HostAFR, RackAFR        float64 // annual rates: a disk, a host (its disks), a rack (all of it) lost
	Years                            int     // simulated years per layout
	MDS                              int     // MDS processes (routing)
	Seed                             uint64
	// NoDomains places as if no OSD named its host or rack (to compare).
	NoDomains bool
}

// DefaultConfig is the cluster the issue names: 10,000 OSDs (25 racks of
// 20 hosts of 20 disks of 16 TB), 100 million files.
func DefaultConfig() Config {
	return Config{Racks: 25, HostsPerRack: 20, OSDsPerHost: 20, OSDBytes: 16e12, OSDBandwidth: 100e6,
		SlowFraction: 0.01, SlowFactor: 0.1, Files: 100_000_000, SampleFiles: 200_000,
		Layouts: []string{"mirror:3", "ec:4+2", "ec:8+3"}, DiskAFR: 0.02, HostAFR: 0.01, RackAFR: 0.002,
		Years: 1000, MDS: 10, Seed: 1}
}

// osd is one simulated OSD.
type osd struct {
	id         uint32
	host, rack int
	bandwidth  float64
}

// world is the cluster and its sampled files under one layout.
type world struct {
	cfg   Config
	rng   *rand.Rand
	osds  []osd // by id-1
	files []file
	onOSD map[uint32][]compOf // the sampled components on each OSD
	est   map[uint32]int64    // bytes on each OSD, weighted
}

// file is a sampled file, standing for weight files of its size.
type file struct {
	size   int64
	weight float64
	l      layout.Layout
}

// compOf is a sampled component: its file, its index, and the bytes it
// holds for all the files the sample stands for.
type compOf struct {
	file, comp int
	bytes      int64
}

// newWorld builds the cluster (n OSDs beyond the configured ones may be
// added later) and places the sampled files with spec.
func newWorld(cfg Config, spec layout.Spec, rng *rand.Rand) (*world, error) {
	w := &world{cfg: cfg, rng: rng, onOSD: map[uint32][]compOf{}, est: map[uint32]int64{}}
	w.addRacks(cfg.Racks)
	counts, weights := samplesPerClass(cfg.SampleFiles, cfg.Files)
	var order []int // the classes' samples interleaved, as files arrive
	for c, k := range counts {
		for range k {
			order = append(order, c)
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var pool *placement.Pool
	for i, c := range order {
		if i%10_000 == 0 {
			pool = placement.NewPool(w.candidates(nil)) // free space as the heartbeats report it
		}
		size := sizeMix[c].draw(rng)
		s := placement.SmallFileSpec(spec, size)
		l, err := pool.Place(s, size, rng)
		if err != nil {
			return nil, err
		}
		w.files = append(w.files, file{size: size, weight: weights[c], l: l})
		w.index(len(w.files) - 1)
	}
	return w, nil
}

// addRacks adds n racks of the configured shape.
func (w *world) addRacks(n int) {
	base := 0
	if len(w.osds) > 0 {
		base = w.osds[len(w.osds)-1].rack + 1
	}
	for r := range n {
		for h := range w.cfg.HostsPerRack {
			for range w.cfg.OSDsPerHost {
				bw := w.cfg.OSDBandwidth
				if w.rng.Float64() < w.cfg.SlowFraction {
					bw *= w.cfg.SlowFactor
				}
				w.osds = append(w.osds, osd{id: uint32(len(w.osds) + 1), host: (base+r)*w.cfg.HostsPerRack + h, rack: base + r, bandwidth: bw})
			}
		}
	}
}

// candidates are the OSDs placement may use, less those in out.
func (w *world) candidates(out map[uint32]bool) []placement.Candidate {
	cands := make([]placement.Candidate, 0, len(w.osds))
	for _, o := range w.osds {
		if out[o.id] {
			continue
		}
		c := placement.Candidate{ID: o.id, FreeBytes: max(w.cfg.OSDBytes-w.est[o.id], 1)}
		if !w.cfg.NoDomains {
			c.Host, c.Rack = fmt.Sprint("h", o.host), fmt.Sprint("r", o.rack)
		}
		cands = append(cands, c)
	}
	return cands
}

// views are every OSD's state: up, but out in out.
func (w *world) views(out map[uint32]bool) map[uint32]cluster.View {
	v := make(map[uint32]cluster.View, len(w.osds))
	for _, o := range w.osds {
		st := cluster.StateUp
		if out[o.id] {
			st = cluster.StateOut
		}
		v[o.id] = cluster.View{State: st}
	}
	return v
}

// index records file i's components on their OSDs.
func (w *world) index(i int) {
	f := &w.files[i]
	for c, id := range f.l.OSDs {
		n := w.compBytes(f, c)
		w.onOSD[id] = append(w.onOSD[id], compOf{i, c, n})
		w.est[id] += n
	}
}

// compBytes is what component c of f holds, for all the files f stands for.
func (w *world) compBytes(f *file, c int) int64 {
	return int64(float64(f.l.DataLen(f.size, c)) * f.weight)
}

// sizeClass is one class of the file size mix: its share of the files
// and its size range (log-uniform within).
type sizeClass struct {
	share  float64
	lo, hi float64
}

// sizeMix is a mix like the file systems HPC and media sites report:
// most files small, most bytes in the few large ones.
var sizeMix = []sizeClass{{0.60, 1 << 10, 64 << 10}, {0.28, 64 << 10, 16 << 20}, {0.10, 16 << 20, 1 << 30}, {0.02, 1 << 30, 64 << 30}}

// meanSize is a class's mean size (log-uniform).
func (c sizeClass) meanSize() float64 { return (c.hi - c.lo) / math.Log(c.hi/c.lo) }

func (c sizeClass) draw(rng *rand.Rand) int64 {
	return int64(math.Exp(math.Log(c.lo) + rng.Float64()*(math.Log(c.hi)-math.Log(c.lo))))
}

// samplesPerClass splits n samples over the classes by their share of
// the bytes (stratified: the large files, which hold the bytes, get the
// samples that decide the spread), at least 1% of n each; it returns
// each class's samples and the files each sample stands for.
func samplesPerClass(n int, files int64) (counts []int, weights []float64) {
	var bytes []float64
	total := 0.0
	for _, c := range sizeMix {
		b := c.share * c.meanSize()
		bytes = append(bytes, b)
		total += b
	}
	for i, c := range sizeMix {
		k := max(n/100, int(float64(n)*bytes[i]/total))
		counts = append(counts, k)
		weights = append(weights, c.share*float64(files)/float64(k))
	}
	return counts, weights
}

// spreadStats is the capacity spread: max, 99th percentile and standard
// deviation over the mean, of the bytes per OSD.
type spreadStats struct {
	Mean                     float64
	MaxOverMean, P99OverMean float64
	StdOverMean              float64
	FillFraction             float64 // of raw capacity
	PerOSD                   []float64
}

func (w *world) spread() spreadStats {
	var xs []float64
	for _, o := range w.osds {
		xs = append(xs, float64(w.est[o.id]))
	}
	slices.Sort(xs)
	mean, sq := 0.0, 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		sq += (x - mean) * (x - mean)
	}
	return spreadStats{Mean: mean, MaxOverMean: xs[len(xs)-1] / mean, P99OverMean: xs[len(xs)*99/100] / mean,
		StdOverMean: math.Sqrt(sq/float64(len(xs))) / mean, FillFraction: mean / float64(w.cfg.OSDBytes), PerOSD: xs}
}

// duration is seconds as a time.Duration.
func duration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
