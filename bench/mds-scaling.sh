#!/usr/bin/env bash
# Metadata service scaling, after Slice's directory-server experiment
# (its Figure 3: create-heavy work from several clients over a tree):
# WORKERS clients create, stat, list and remove FILES empty files spread
# over DIRS directories, through the client library (`braid bench
# --meta --dirs`), against
#   - one MDS on its embedded store (Pebble),
#   - three MDS processes on embedded etcd, one active (standbys),
#   - 1, 2 and 3 MDS processes on embedded etcd, all active (--all-active),
# every directory hashed to a slot of its own (--mkdir-switch 1), all in
# one run. Prints each run's rates and its CPU per operation over the
# MDS processes (their etcd members included), then each rate as a ratio
# to one active MDS on etcd. On one machine the processes share its
# cores: see the README for what a cluster of machines should expect.
set -euo pipefail
FILES=${FILES:-6000}
DIRS=${DIRS:-64}
WORKERS=${WORKERS:-4}
OSDS=${OSDS:-2}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
bin=$work/braid
uppid=""
cleanup() {
  [ -n "$uppid" ] && { kill -INT "$uppid" 2>/dev/null || true; wait "$uppid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid)

# run NAME UP-ARGS...: a fresh cluster, the benchmark, its output in $work/NAME.out.
run() {
  local name=$1; shift
  export XDG_STATE_HOME=$work/state-$name
  "$bin" up --dir "$work/$name" --osds "$OSDS" --mkdir-switch 1 "$@" >"$work/$name.up.log" 2>&1 &
  uppid=$!
  for _ in $(seq 600); do
    [ -f "$XDG_STATE_HOME/braid/cluster.json" ] && break
    kill -0 "$uppid" 2>/dev/null || { cat "$work/$name.up.log"; exit 1; }
    sleep 0.1
  done
  # every process in the routing table, and every OSD up, before the clock starts
  for _ in $(seq 300); do
    "$bin" status --json 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); r=s["meta"].get("routing") or {}; n=sum(1 for m in s["meta"]["mds"] if m["role"] in ("active","leader")); up=sum(1 for o in s["osds"] if o["state"]=="up"); sys.exit(0 if len(r.get("servers",[]))==max(n,1) and up=='"$OSDS"' else 1)' && break
    sleep 0.2
  done
  sleep 2 # the others adopt the leader's OSD map within a second
  "$bin" bench --meta --files "$FILES" --dirs "$DIRS" --workers "$WORKERS" >"$work/$name.out"
  kill -INT "$uppid"; wait "$uppid" || true; uppid=""
  echo "== $name"; cat "$work/$name.out"
}

run pebble
run etcd3-standby --mds-count 3
run active1 --mds-count 1 --all-active
run active2 --mds-count 2 --all-active
run active3 --mds-count 3 --all-active

echo
echo "ratio to one active MDS on etcd (active1), $WORKERS workers, $FILES files in $DIRS directories"
python3 - "$work" <<'PY'
import sys, os
work = sys.argv[1]
def rates(name):
    for line in open(os.path.join(work, name + ".out")):
        f = line.split()
        if len(f) == 7 and f[0].isdigit():
            return [float(x) for x in f[3:]]
base = rates("active1")
print(f"{'':16} {'create':>8} {'stat':>8} {'readdir':>8} {'remove':>8}")
for name in ["pebble", "etcd3-standby", "active1", "active2", "active3"]:
    r = rates(name)
    print(f"{name:16} " + " ".join(f"{a / b:7.2f}x" for a, b in zip(r, base)))
PY
