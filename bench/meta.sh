#!/usr/bin/env bash
# Metadata benchmark: create (and close), stat, readdir and remove of
# FILES empty files in one directory, from 1 and 4 processes, on
#   - a local directory,
#   - go-fuse's loopback example over a local directory (the ceiling of a
#     FUSE file system on this machine, with the kernel's same 1 s caches),
#   - a braid mount (`braid up --mount`, six OSDs),
# all in one run, and through the client library (`braid bench --meta`).
# Prints rates and braid ÷ loopback. Needs root (mounts).
set -euo pipefail
FILES=${FILES:-100000}
PROCS=${PROCS:-"1 4"}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
bin=$work/braid
mnt=$work/mnt
lb=$work/loopback
uppid=""
lbpid=""
cleanup() {
  [ -n "$lbpid" ] && { umount "$lb" 2>/dev/null || true; kill "$lbpid" 2>/dev/null || true; wait "$lbpid" 2>/dev/null || true; }
  [ -n "$uppid" ] && { kill -INT "$uppid" 2>/dev/null || true; wait "$uppid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid && go build -o "$work/loopback-fs" github.com/hanwen/go-fuse/v2/example/loopback)
export XDG_STATE_HOME=$work/state
"$bin" up --dir "$work/cluster" --mount "$mnt" >"$work/up.log" 2>&1 &
uppid=$!
mkdir -p "$work/local" "$work/lbsrc" "$lb"
"$work/loopback-fs" -q -directmount "$lb" "$work/lbsrc" >"$work/lb.log" 2>&1 &
lbpid=$!
for _ in $(seq 300); do
  grep -q '^  mount ' "$work/up.log" && mountpoint -q "$lb" && break
  sleep 0.1
done
mountpoint -q "$mnt" && mountpoint -q "$lb" || { cat "$work/up.log" "$work/lb.log"; exit 1; }

# meta DIR PROCS: prints create/s stat/s readdir-entries/s remove/s.
meta() { python3 - "$1" "$FILES" "$2" <<'PY'
import os, sys, time
from multiprocessing import Pool
d, n, procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = os.path.join(d, f"meta{procs}"); os.mkdir(d)
def names(w): return [os.path.join(d, f"f{i:07d}") for i in range(w, n, procs)]
def create(w):
    for p in names(w): os.close(os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
def stat(w):
    for p in names(w): os.stat(p)
def remove(w):
    for p in names(w): os.unlink(p)
pool = Pool(procs)
pool.map(len, [[]] * procs)  # the workers are up before the clock starts
def timed(fn):
    t = time.monotonic(); pool.map(fn, range(procs)); return n / (time.monotonic() - t)
c = timed(create); s = timed(stat)
os.system("sync; echo 2 > /proc/sys/vm/drop_caches")  # the listing comes from the file system, not the dentry cache
t = time.monotonic(); listed = sum(1 for _ in os.scandir(d)); rd = listed / (time.monotonic() - t)
assert listed == n, (listed, n)
r = timed(remove); os.rmdir(d)
print(f"{c:.0f} {s:.0f} {rd:.0f} {r:.0f}")
PY
}

declare -A res
for p in $PROCS; do
  for where in local loopback braid; do
    case $where in local) dir=$work/local ;; loopback) dir=$lb ;; braid) dir=$mnt ;; esac
    res[$where,$p]=$(meta "$dir" "$p")
  done
done
lib=$("$bin" bench --meta --files "$FILES" --workers "$(echo $PROCS | tr ' ' ,)")

echo "$FILES empty files in one directory (create+close, stat, readdir entries, remove; per second)"
echo
echo "| procs | operation | local dir | go-fuse loopback | braid mount | braid ÷ loopback |"
echo "|---|---|---|---|---|---|"
for p in $PROCS; do
  read -r lc ls lr lm <<<"${res[local,$p]}"
  read -r oc os_ or om <<<"${res[loopback,$p]}"
  read -r bc bs br bm <<<"${res[braid,$p]}"
  python3 - "$p" "$lc" "$ls" "$lr" "$lm" "$oc" "$os_" "$or" "$om" "$bc" "$bs" "$br" "$bm" <<'PY'
import sys
p = sys.argv[1]; v = list(map(float, sys.argv[2:]))
for i, name in enumerate(["create", "stat", "readdir", "remove"]):
    l, o, b = v[i], v[4 + i], v[8 + i]
    print(f"| {p} | {name} | {l:,.0f} | {o:,.0f} | {b:,.0f} | {b/o:.2f}x |")
PY
done
echo
echo "through the client library (braid bench --meta):"
echo "$lib"
