package scalesim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/braidfs/braid/internal/layout"
)

// Result is what the simulation found for one layout.
type Result struct {
	Layout        string
	Spread        spreadStats
	Disk, Host    rebuild
	Rack          rebuild
	Growth        growth
	LossPerYear   float64 // simulated
	ClosedForm    float64 // textbook MTTDL's, disk failures alone
	GroupsPerFile float64
	YearsRun      int
	Elapsed       time.Duration // wall time of the simulated years (from the caller's clock)
}

// Report is a whole run.
type Report struct {
	Config  Config
	Results []Result
}

// Run simulates each layout of cfg. now is the caller's clock, read only
// to report how long the simulated years took.
func Run(cfg Config, now func() time.Time) (Report, error) {
	rep := Report{Config: cfg}
	for i, text := range cfg.Layouts {
		spec, err := layout.Parse(text)
		if err != nil {
			return rep, fmt.Errorf("layout %q: %w", text, err)
		}
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
		w, err := newWorld(cfg, spec, rng)
		if err != nil {
			return rep, fmt.Errorf("layout %s: %w", text, err)
		}
		r := Result{Layout: text, Spread: w.spread(), YearsRun: cfg.Years}
		var groups float64
		for _, c := range w.groupClasses() {
			groups += c.groups
		}
		r.GroupsPerFile = groups / float64(cfg.Files)
		// A disk of median load, a host, a rack.
		r.Disk = w.rebuildOf(map[uint32]bool{w.osds[len(w.osds)/2].id: true})
		r.Host = w.rebuildOf(w.hostOSDs(w.osds[len(w.osds)/2].host))
		rack := map[uint32]bool{}
		for _, o := range w.osds {
			if o.rack == 0 {
				rack[o.id] = true
			}
		}
		r.Rack = w.rebuildOf(rack)
		m := &lossModel{w: w, classes: w.groupClasses(), hosts: cfg.Racks * cfg.HostsPerRack}
		began := now()
		r.LossPerYear = m.lossYears(rng, cfg.Years, r.Disk.Seconds, r.Host.Seconds, r.Rack.Seconds)
		r.Elapsed = now().Sub(began)
		r.ClosedForm = closedFormLoss(len(w.osds), cfg.DiskAFR, r.Disk.Seconds, spec.Tolerates())
		r.Growth = w.grow()
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

// Text is the report as a reader wants it.
func (rep Report) Text() string {
	var b strings.Builder
	c := rep.Config
	n := c.Racks * c.HostsPerRack * c.OSDsPerHost
	fmt.Fprintf(&b, "%d OSDs (%d racks x %d hosts x %d disks of %s), %d files (%d placed for real), %d simulated years a layout\n",
		n, c.Racks, c.HostsPerRack, c.OSDsPerHost, bytesText(c.OSDBytes), c.Files, c.SampleFiles, c.Years)
	fmt.Fprintf(&b, "failures a year: disks %.1f%%, hosts %.1f%%, racks %.2f%%; %.0f%% of disks slow (%.0f%% speed); rebuild bandwidth %s/s an OSD\n",
		100*c.DiskAFR, 100*c.HostAFR, 100*c.RackAFR, 100*c.SlowFraction, 100*c.SlowFactor, bytesText(int64(c.OSDBandwidth)))
	if c.NoDomains {
		fmt.Fprintf(&b, "placement ignores hosts and racks\n")
	}
	for _, r := range rep.Results {
		fmt.Fprintf(&b, "\n%s (%.1f parity groups a file):\n", r.Layout, r.GroupsPerFile)
		fmt.Fprintf(&b, "  capacity: %.1f%% full; per OSD max %.3f, p99 %.3f, stddev %.3f of the mean\n",
			100*r.Spread.FillFraction, r.Spread.MaxOverMean, r.Spread.P99OverMean, r.Spread.StdOverMean)
		for _, x := range []struct {
			what string
			r    rebuild
		}{{"a disk", r.Disk}, {"a host", r.Host}, {"a rack", r.Rack}} {
			fmt.Fprintf(&b, "  rebuild after %s: %v (%s written by %d OSDs, %d files", x.what, duration(x.r.Seconds).Round(time.Second),
				bytesText(x.r.Bytes), x.r.Participants, x.r.Files)
			if x.r.Unrepairable > 0 {
				fmt.Fprintf(&b, ", %d beyond parity", x.r.Unrepairable)
			}
			fmt.Fprintf(&b, ")\n")
		}
		g := r.Growth
		fmt.Fprintf(&b, "  adding %d OSDs: the balancer moved %s in %d moves (%.2fx the new OSDs' fair share), max %.3f of the mean after; a new MDS process takes %d of %d slots\n",
			g.AddedOSDs, bytesText(g.MovedBytes), g.Moves, float64(g.MovedBytes)/float64(max(g.IdealBytes, 1)), g.SpreadAfter, g.SlotsMoved, g.SlotsOf)
		fmt.Fprintf(&b, "  data loss: %.3g a year simulated (%d years in %v); the textbook MTTDL for disk failures alone says %.3g\n",
			r.LossPerYear, r.YearsRun, r.Elapsed.Round(time.Millisecond), r.ClosedForm)
	}
	return b.String()
}

// bytesText is n in decimal units, as disks are sold.
func bytesText(n int64) string {
	units := []string{"B", "kB", "MB", "GB", "TB", "PB", "EB"}
	x, u := float64(n), 0
	for x >= 1000 && u < len(units)-1 {
		x /= 1000
		u++
	}
	return fmt.Sprintf("%.3g %s", x, units[u])
}
