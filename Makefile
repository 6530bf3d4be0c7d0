# braid — build and test entry points. `make test` is the whole suite (what
# CI runs); it needs Go, a C compiler for the race detector, and the real
# S3 clients of the gateway's tests, which `deps` installs when missing.

GO       ?= go
FUZZTIME ?= 10s

.PHONY: all build check test deps lint unit simci fuzz bench soak faults sim

all: build

build:
	$(GO) build -o bin/braid ./cmd/braid

# The quick loop (well under a minute): formatting, vet, and the cores'
# purity rule, transcripts and simulation with invariants checked after
# every decision.
check: lint
	$(GO) test -count=1 -tags invariants ./internal/core/... ./internal/layout ./internal/invariants

# The whole suite: formatting, vet, every test under the race detector,
# then each fuzz target for FUZZTIME.
test: deps lint unit simci fuzz

# boto3 and the AWS CLI (internal/e2e/s3_test.go), from PyPI.
PYTHON ?= python3
deps:
	@$(PYTHON) -c 'import boto3' 2>/dev/null && command -v aws >/dev/null || \
	  { $(PYTHON) -m pip install --quiet --disable-pip-version-check boto3 awscli && \
	    { ! command -v pyenv >/dev/null || pyenv rehash; }; }

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

# Every decoder of bytes from the network or disk, fuzzed briefly.
fuzz:
	GO=$(GO) scripts/fuzz-one.sh FuzzReadFrame ./internal/wire $(FUZZTIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzDec ./internal/wire $(FUZZTIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecode ./internal/capability $(FUZZTIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzDecode ./internal/osdproto $(FUZZTIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzHandler ./internal/osd $(FUZZTIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzPackSegment ./internal/osd $(FUZZTIME)
	GO=$(GO) scripts/fuzz-one.sh FuzzHandler ./internal/mds $(FUZZTIME)

# The seeded whole-cluster simulation (sim_test.go) and the OSD store's
# crash test: a failure prints its seed and BRAID_SEED=N replays it.
# `unit` runs 8 cluster seeds under the race detector (and 2 with three
# MDS processes); simci 50 without it and 30 with three MDS processes
# (about 4 minutes here); sim as many as SEEDS of each.
simci:
	BRAID_SIM_SEEDS=50 $(GO) test -count=1 -timeout 20m -run '^TestSimulation$$' .
	BRAID_SIM_SEEDS=30 $(GO) test -count=1 -timeout 20m -run '^TestSimulationSeveralMDS$$' .
	BRAID_CORESIM_SEEDS=2000 $(GO) test -count=1 -timeout 20m -tags invariants -run '^TestCoreSimulation$$' ./internal/core/coresim

SEEDS ?= 2000
FIRST ?= 1
sim:
	BRAID_SIM_FIRST=$(FIRST) BRAID_SIM_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 600m -run '^TestSimulation$$' .
	BRAID_SIM_FIRST=$(FIRST) BRAID_SIM_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 600m -run '^TestSimulationSeveralMDS$$' .
	BRAID_SEEDS=$(SEEDS) $(GO) test -count=1 -timeout 120m -run 'TestCrashNeverReadsUnwrittenBytes' ./internal/osd
	BRAID_CORESIM_SEEDS=$$(( $(SEEDS) * 50 )) $(GO) test -count=1 -timeout 120m -tags invariants -run 'TestCoreSimulation' ./internal/core/coresim

# Throughput at 1 GiB per file (numbers in the README come from here and
# from `braid bench` against `braid up`).
bench:
	BRAID_BENCH_SIZE=1GiB $(GO) test -run '^$$' -bench 'Sequential|WriteWithoutStorage' -benchtime 1x ./

# Longer fuzzing and fault injection, for before a release.
soak: faults
	$(MAKE) fuzz FUZZTIME=5m

# The fault-injection runs (real processes, SIGKILL) for SOAK each instead
# of CI's ~25 s; BRAID_SEED=N replays a run.
SOAK ?= 10m
faults:
	BRAID_SOAK=$(SOAK) $(GO) test -count=1 -v -timeout 120m -run 'TestFaultInjection|TestFaultInjectionSeveralMDS|TestClientKilledMidWrite' ./internal/e2e
