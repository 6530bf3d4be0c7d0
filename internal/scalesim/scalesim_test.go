package scalesim

import (
	"math"
	"testing"
	"time"
)

// TestClosedFormCase: where the textbook model holds (disk failures
// alone, every pair of OSDs sharing a mirrored group, one rebuild time),
// the simulated chance of loss in a year matches its MTTDL.
func TestClosedFormCase(t *testing.T) {
	cfg := Config{Racks: 1, HostsPerRack: 10, OSDsPerHost: 10, OSDBytes: 16e12, OSDBandwidth: 50e6,
		Files: 300_000, SampleFiles: 1000, Layouts: []string{"mirror:2"}, DiskAFR: 0.5, Years: 4000, MDS: 3, Seed: 7, NoDomains: true}
	rep, err := Run(cfg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	t.Log(rep.Text())
	if r.ClosedForm < 0.01 || r.ClosedForm > 0.9 {
		t.Fatalf("the case is not a useful check: closed form %.3g", r.ClosedForm)
	}
	if ratio := r.LossPerYear / r.ClosedForm; math.Abs(math.Log(ratio)) > math.Log(1.3) {
		t.Fatalf("simulated loss %.3g a year, closed form %.3g (ratio %.2f)", r.LossPerYear, r.ClosedForm, ratio)
	}
}

// TestRacksProtectData: a whole rack lost never loses data when groups
// span distinct racks; placed without domains, it does.
func TestRacksProtectData(t *testing.T) {
	cfg := Config{Racks: 8, HostsPerRack: 2, OSDsPerHost: 2, OSDBytes: 16e12, OSDBandwidth: 100e6,
		Files: 100_000, SampleFiles: 1000, Layouts: []string{"ec:4+2"}, RackAFR: 1, Years: 100, MDS: 3, Seed: 3}
	with, err := Run(cfg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NoDomains = true
	without, err := Run(cfg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if with.Results[0].Rack.Unrepairable != 0 {
		t.Fatalf("with racks: a rack's loss left %d files beyond parity", with.Results[0].Rack.Unrepairable)
	}
	if without.Results[0].Rack.Unrepairable == 0 {
		t.Fatal("without racks: a rack's loss left no file beyond parity (the test shows nothing)")
	}
	if w, wo := with.Results[0].LossPerYear, without.Results[0].LossPerYear; w >= wo/10 {
		t.Fatalf("rack-aware placement: %.3g loss a year, without: %.3g", w, wo)
	}
}

// TestSeedReplays: the same seed gives the same report.
func TestSeedReplays(t *testing.T) {
	cfg := Config{Racks: 4, HostsPerRack: 2, OSDsPerHost: 2, OSDBytes: 4e12, OSDBandwidth: 100e6,
		Files: 100_000, SampleFiles: 500, Layouts: []string{"ec:4+2"}, DiskAFR: 0.5, HostAFR: 0.2, Years: 20, MDS: 3, Seed: 5}
	frozen := func() time.Time { return time.Unix(0, 0) }
	a, err := Run(cfg, frozen)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(cfg, frozen)
	if a.Text() != b.Text() {
		t.Fatalf("seed 5 twice:\n%s\n%s", a.Text(), b.Text())
	}
}
