#!/usr/bin/env bash
# Small writes and shared files through a braid FUSE mount (six OSDs,
# default ec:4+2) next to a local directory of the same disk, in one run:
#   - fio: 4 KiB random writes (end fsync) and reads, 16 MiB in a 64 MiB
#     file, buffered and O_DIRECT (psync)
#   - fio: 2 and 4 jobs writing interleaved 47,008-byte and 1 MiB blocks of
#     one 64 MiB file (the N-to-1 checkpoint pattern), next to the same
#     jobs each writing a file of its own (file per process)
#   - two processes on two mounts writing interleaved blocks of one file,
#     every block read back and checked
# Ratios: mount / local for the fio 4 KiB rows, shared / file per process
# for the checkpoint rows.
# Then `braid check` over everything. Needs root (mounts) and fio
# (apt-get install fio).
set -euo pipefail
command -v fio >/dev/null || { echo "needs fio (apt-get install fio)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
bin=$work/braid
cleanup() {
  umount "$work/mnt2" 2>/dev/null || true
  kill -INT $uppid 2>/dev/null; wait $uppid 2>/dev/null; rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid)
export XDG_STATE_HOME=$work/state
"$bin" up --dir "$work/cluster" --mount "$work/mnt" >"$work/up.log" 2>&1 &
uppid=$!
for _ in $(seq 300); do grep -q '^  mount ' "$work/up.log" && break; sleep 0.1; done
mkdir -p "$work/local" "$work/mnt2"
"$bin" mount "$work/mnt2" >"$work/mount2.log" 2>&1 &
for _ in $(seq 100); do mountpoint -q "$work/mnt2" && break; sleep 0.1; done

wbw() { awk -F';' '{printf "%.1f", $48 * 1.024 / 1000}'; } # fio terse v3: write KB/s
rbw() { awk -F';' '{printf "%.1f", $7 * 1.024 / 1000}'; }  # read KB/s
fiot() { fio --output-format=terse --terse-version=3 --ioengine=psync "$@" 2>/dev/null; }
# shared N BS DIR: N jobs writing interleaved BS-byte blocks of one 64 MiB file
shared() {
  local n=$1 bs=$2 dir=$3 args=() j
  for j in $(seq 0 $((n - 1))); do
    args+=(--name=j$j --rw=write:$(((n - 1) * bs)) --offset=$((j * bs)))
  done
  rm -f "$dir/shared"
  fiot --filename="$dir/shared" --bs=$bs --size=64m --end_fsync=1 --group_reporting "${args[@]}" | wbw
}
# fpp N BS DIR: N jobs, each writing its own file of 64/N MiB
fpp() {
  local n=$1 bs=$2 dir=$3 args=() j
  for j in $(seq 0 $((n - 1))); do
    rm -f "$dir/fpp.$j"
    args+=(--name=j$j --filename="$dir/fpp.$j")
  done
  fiot --rw=write --bs=$bs --size=$((64 / n))m --end_fsync=1 --group_reporting "${args[@]}" | wbw
}
declare -A res
for where in local mnt; do
  dir=$work/$where
  for direct in 0 1; do
    res[$where.randwrite.$direct]=$(fiot --name=r --filename="$dir/rand" --rw=randwrite --bs=4k --size=64m \
      --io_size=16m --direct=$direct --end_fsync=1 | wbw)
    res[$where.randread.$direct]=$(fiot --name=r --filename="$dir/rand" --rw=randread --bs=4k --size=64m \
      --io_size=16m --direct=$direct | rbw)
  done
  for n in 2 4; do
    for bs in 47008 1048576; do
      res[$where.shared.$n.$bs]=$(shared $n $bs "$dir")
      res[$where.fpp.$n.$bs]=$(fpp $n $bs "$dir")
    done
  done
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
printf '%-44s %10s %10s %8s\n' "pattern (MB/s)" local mount ratio
for op in randwrite randread; do
  for direct in 0 1; do
    what="fio 4 KiB $op$( [ $direct = 1 ] && echo ", O_DIRECT" || echo ", buffered")"
    l=${res[local.$op.$direct]} m=${res[mnt.$op.$direct]}
    printf '%-44s %10s %10s %8s\n' "$what" "$l" "$m" "$(ratio "$m" "$l")"
  done
done
printf '%-44s %10s %10s %8s\n' "shared file vs file per process" "shared" "per proc" "ratio"
for where in local mnt; do
  for n in 2 4; do
    for bs in 47008 1048576; do
      s=${res[$where.shared.$n.$bs]} f=${res[$where.fpp.$n.$bs]}
      printf '%-44s %10s %10s %8s\n' "$where, $n jobs, $bs-byte blocks" "$s" "$f" "$(ratio "$s" "$f")"
    done
  done
done
printf 'two mounts, interleaved blocks: '
python3 - "$work/mnt" "$work/mnt2" <<'PY'
import hashlib, os, sys, time
from multiprocessing import Process
B, N = 47008, 700
def blk(i): return (hashlib.sha256(str(i).encode()).digest() * (B // 32 + 1))[:B]
def writer(path, w):
    fd = os.open(path, os.O_WRONLY)
    for i in range(w, N, 2): os.pwrite(fd, blk(i), i * B)
    os.close(fd)
a, b = (os.path.join(m, "two") for m in sys.argv[1:3])
open(a, "wb").close()
t = time.monotonic()
ps = [Process(target=writer, args=(p, w)) for w, p in enumerate([a, b])]
[p.start() for p in ps]; [p.join() for p in ps]
el = time.monotonic() - t
data = open(b, "rb").read()
bad = sum(data[i*B:(i+1)*B] != blk(i) for i in range(N))
print(f"{N*B/el/1e6:.1f} MB/s, {bad} of {N} blocks wrong")
PY
"$bin" check / | tail -1
