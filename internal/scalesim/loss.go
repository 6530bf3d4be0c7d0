package scalesim

import (
	"math"
	"math/rand/v2"
	"sort"
)

// groupClass is how many parity groups of one width and parity the
// cluster holds (a layout's large files, and its small files mirrored).
type groupClass struct {
	width, parity int
	groups        float64
}

// groupClasses counts the groups of the sampled files, weighted.
func (w *world) groupClasses() []groupClass {
	byKey := map[[2]int]float64{}
	for i := range w.files {
		f := &w.files[i]
		byKey[[2]int{f.l.Spec.Width(), f.l.Spec.Tolerates()}] += float64(f.l.Groups) * f.weight
	}
	var out []groupClass
	for k, g := range byKey {
		out = append(out, groupClass{width: k[0], parity: k[1], groups: g})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].width < out[j].width })
	return out
}

// lossModel judges whether a set of failed OSDs loses data.
type lossModel struct {
	w       *world
	classes []groupClass
	hosts   int
}

// lossChance is the chance that some parity group has more of its
// components among failed than its parity: 1 - exp(-λ), λ the expected
// number of such groups. A group takes one OSD per rack when the cluster
// has as many racks as the group is wide, else one per host when it has
// as many hosts, else any distinct OSDs (placement's rule); each failed
// domain is then in a group with chance width/domains, and the group's
// OSD in it failed with the domain's failed fraction.
func (m *lossModel) lossChance(failed map[uint32]bool) float64 {
	if len(failed) == 0 {
		return 0
	}
	lambda := 0.0
	for _, c := range m.classes {
		var q []float64
		switch {
		case !m.w.cfg.NoDomains && m.w.cfg.Racks >= c.width:
			q = m.domainChances(failed, c.width, func(o osd) int { return o.rack }, m.w.racks())
		case !m.w.cfg.NoDomains && m.hosts >= c.width:
			q = m.domainChances(failed, c.width, func(o osd) int { return o.host }, m.hosts)
		default:
			p := float64(c.width) / float64(len(m.w.osds))
			for range failed {
				q = append(q, p)
			}
		}
		lambda += c.groups * atLeast(q, c.parity+1)
	}
	return 1 - math.Exp(-lambda)
}

// domainChances is, per domain with failed OSDs, the chance a group has
// a failed OSD there.
func (m *lossModel) domainChances(failed map[uint32]bool, width int, of func(osd) int, domains int) []float64 {
	bad := map[int]int{}
	for id := range failed {
		bad[of(m.w.osds[id-1])]++
	}
	perDomain := float64(len(m.w.osds)) / float64(domains) // OSDs a domain holds (all alike)
	var q []float64
	for _, n := range bad {
		q = append(q, float64(width)/float64(domains)*float64(n)/perDomain)
	}
	sort.Float64s(q) // the sum below does not depend on it; a replay does
	return q
}

// atLeast is the chance that k or more of independent events with
// chances q happen (Poisson-binomial).
func atLeast(q []float64, k int) float64 {
	if len(q) < k {
		return 0
	}
	dp := make([]float64, k+1) // dp[j]: chance of j so far (k: k or more)
	dp[0] = 1
	for _, p := range q {
		for j := k; j >= 0; j-- {
			stay := dp[j] * (1 - p)
			if j == k {
				stay = dp[j]
			}
			if j > 0 {
				stay += dp[j-1] * p
			}
			dp[j] = stay
		}
	}
	return dp[k]
}

func (w *world) racks() int { return w.osds[len(w.osds)-1].rack + 1 }

// lossYears simulates years of failures: disks, hosts and racks fail as
// Poisson processes, each failed OSD vulnerable until its rebuild ends
// (tDisk, tHost, tRack seconds). At each failure the chance that the
// failed set loses data is taken; a year's chance of loss is one minus
// the product of the chances it escaped. It returns the mean over years.
func (m *lossModel) lossYears(rng *rand.Rand, years int, tDisk, tHost, tRack float64) float64 {
	const year = 365.25 * 24 * 3600
	cfg := m.w.cfg
	n, hosts, racks := float64(len(m.w.osds)), float64(m.hosts), float64(m.w.racks())
	rates := []float64{n * cfg.DiskAFR / year, hosts * cfg.HostAFR / year, racks * cfg.RackAFR / year}
	total := rates[0] + rates[1] + rates[2]
	if total == 0 {
		return 0
	}
	sum := 0.0
	for range years {
		until := map[uint32]float64{} // failed OSD → its rebuild's end
		escaped := 0.0                // log of the chance the year lost nothing
		for t := rng.ExpFloat64() / total; t < year; t += rng.ExpFloat64() / total {
			for id, end := range until {
				if end <= t {
					delete(until, id)
				}
			}
			u := rng.Float64() * total
			switch {
			case u < rates[0]:
				until[uint32(rng.IntN(len(m.w.osds)))+1] = t + tDisk
			case u < rates[0]+rates[1]:
				h := rng.IntN(m.hosts)
				for id := range m.w.hostOSDs(h) {
					until[id] = t + tHost
				}
			default:
				r := rng.IntN(m.w.racks())
				for _, o := range m.w.osds {
					if o.rack == r {
						until[o.id] = t + tRack
					}
				}
			}
			failed := make(map[uint32]bool, len(until))
			for id := range until {
				failed[id] = true
			}
			if p := m.lossChance(failed); p >= 1 {
				escaped = math.Inf(-1)
			} else {
				escaped += math.Log1p(-p)
			}
		}
		sum += 1 - math.Exp(escaped)
	}
	return sum / float64(years)
}

// closedFormLoss is the textbook MTTDL's chance of loss in a year, for
// disk failures alone when any parity+1 concurrent failures lose data:
// MTTDL = MTTF^(M+1) / (N(N-1)...(N-M) MTTR^M).
func closedFormLoss(n int, afr, mttrSeconds float64, parity int) float64 {
	const year = 365.25 * 24 * 3600
	mttf := year / afr
	mttdl := mttf
	for j := 1; j <= parity; j++ {
		mttdl *= mttf / (float64(n-j+1) * mttrSeconds)
	}
	mttdl /= float64(n - parity)
	return 1 - math.Exp(-year/mttdl)
}
