#!/usr/bin/env bash
# Small writes and shared files through a braid FUSE mount (six OSDs,
# default ec:4+2) next to a local directory of the same disk, in one run:
#   - fio: 4 KiB random writes, 16 MiB into a 64 MiB file (psync, end fsync)
#   - fio: two jobs writing interleaved 47,008-byte blocks of one 64 MiB
#     file (the N-to-1 checkpoint pattern; every stripe shared)
#   - two processes on two mounts writing interleaved blocks of one file,
#     every block read back and checked
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

bw() { awk -F';' '{printf "%.1f MB/s\n", $48 * 1.024 / 1000}'; }
for where in local mnt; do
  dir=$work/$where
  printf '%-6s 4 KiB random writes:      ' "$where"
  fio --name=r --filename="$dir/rand" --rw=randwrite --bs=4k --size=64m --io_size=16m \
    --ioengine=psync --end_fsync=1 --output-format=terse --terse-version=3 2>/dev/null | bw
  printf '%-6s shared file, two jobs:     ' "$where"
  fio --filename="$dir/shared" --bs=47008 --size=64m --ioengine=psync --end_fsync=1 --group_reporting \
    --output-format=terse --terse-version=3 --name=a --rw=write:47008 --offset=0 \
    --name=b --rw=write:47008 --offset=47008 2>/dev/null | bw
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
