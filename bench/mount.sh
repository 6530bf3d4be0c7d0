#!/usr/bin/env bash
# Mount benchmark: through a braid FUSE mount (6 OSDs, default ec:4+2) and
# on a local directory of the same disk, with the same tools:
#   - 1 GiB sequential write (dd, 1 MiB blocks, fsync at the end)
#   - 1 GiB sequential read  (dd, 1 MiB blocks, page cache dropped first)
#   - 4 KiB random reads of that file (python3 pread, cache dropped first)
#   - create, stat and remove 10,000 empty files in one directory
# Prints each figure and braid ÷ local, and the client library alone
# (braid put / get) for the sequential figures. Needs root (mount, drop_caches).
set -euo pipefail
SIZE_MIB=${SIZE_MIB:-1024}
FILES=${FILES:-10000}
RANDOM_READS=${RANDOM_READS:-4000}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
bin=$work/braid
mnt=$work/mnt
local=$work/local
cleanup() { kill -INT $uppid 2>/dev/null; wait $uppid 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid)
export XDG_STATE_HOME=$work/state
"$bin" up --dir "$work/cluster" --mount "$mnt" >"$work/up.log" 2>&1 &
uppid=$!
for _ in $(seq 300); do grep -q '^  mount ' "$work/up.log" && break; sleep 0.1; done
mkdir -p "$local"

secs() { python3 - "$@" <<'PY'
import sys, time, subprocess
t = time.monotonic(); subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(f"{time.monotonic()-t:.3f}")
PY
}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

randread() { python3 - "$1" "$RANDOM_READS" <<'PY'
import os, random, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY); n = int(sys.argv[2])
blocks = os.fstat(fd).st_size // 4096
rng = random.Random(1); t = time.monotonic()
for _ in range(n):
    os.pread(fd, 4096, rng.randrange(blocks) * 4096)
print(f"{n/(time.monotonic()-t):.0f}")
PY
}

meta() { python3 - "$1" "$FILES" <<'PY'
import os, sys, time
d = os.path.join(sys.argv[1], "meta"); n = int(sys.argv[2]); os.mkdir(d)
names = [os.path.join(d, f"f{i:06d}") for i in range(n)]
t = time.monotonic()
for p in names: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
c = time.monotonic()
for p in names: os.stat(p)
s = time.monotonic()
for p in names: os.unlink(p)
r = time.monotonic()
print(f"{n/(c-t):.0f} {n/(s-c):.0f} {n/(r-s):.0f}")
PY
}

declare -A res
for where in local braid; do
  dir=$local; [ "$where" = braid ] && dir=$mnt
  w=$(secs dd if=/dev/zero of="$dir/seq" bs=1M count="$SIZE_MIB" conv=fsync)
  drop
  r=$(secs dd if="$dir/seq" of=/dev/null bs=1M)
  drop
  rr=$(randread "$dir/seq")
  read -r cr st rm <<<"$(meta "$dir")"
  res[$where]="$w $r $rr $cr $st $rm"
done
# The client library on its own (braid put / braid get), for the mount's
# sequential figures: the source file is read into the page cache first.
cat "$local/seq" >/dev/null
libw=$(secs "$bin" put "$local/seq" /libseq)
drop
libr=$(secs "$bin" get /libseq /dev/null)
read -r lw lr lrr lcr lst lrm <<<"${res[local]}"
read -r bw br brr bcr bst brm <<<"${res[braid]}"
python3 - "$SIZE_MIB" "$libw" "$libr" "$lw" "$lr" "$lrr" "$lcr" "$lst" "$lrm" "$bw" "$br" "$brr" "$bcr" "$bst" "$brm" <<'PY'
import sys
size = float(sys.argv[1]) / 1024 * 1.073741824  # GB
libw, libr = map(float, sys.argv[2:4])
lw, lr, lrr, lcr, lst, lrm, bw, br, brr, bcr, bst, brm = map(float, sys.argv[4:])
rows = [("sequential write 1 MiB blocks (GB/s)", size/lw, size/bw),
        ("sequential read 1 MiB blocks (GB/s)", size/lr, size/br),
        ("4 KiB random reads (per s)", lrr, brr),
        ("create (files/s)", lcr, bcr), ("stat (files/s)", lst, bst), ("remove (files/s)", lrm, brm)]
print(f"| measurement | local dir | braid mount | braid ÷ local |\n|---|---|---|---|")
for name, l, b in rows:
    fmt = (lambda v: f"{v:.2f}") if "GB/s" in name else (lambda v: f"{v:,.0f}")
    print(f"| {name} | {fmt(l)} | {fmt(b)} | {b/l:.2f}x |")
print(f"\nclient library alone (braid put / get): write {size/libw:.2f} GB/s, read {size/libr:.2f} GB/s;"
      f" mount ÷ library: write {libw/bw:.2f}x, read {libr/br:.2f}x")
PY
