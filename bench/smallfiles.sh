#!/usr/bin/env bash
# Files that carry data, side by side in one run (issue 37's baseline):
#   - N files of 4 KiB and of 64 KiB: create, write, close (files/s), read
#     back (files/s, after dropping the kernel's caches), remove (files/s);
#   - untar of Go's source tree (GOROOT/src, about 11,000 files) followed by
#     syncfs, then `rm -rf` of it (seconds);
#   - the CPU the file system's own processes spent on each (braid: the MDS
#     and OSDs, not the mount; JuiceFS: its mount daemon, which is client,
#     metadata and storage in one; loopback: its daemon),
# on a local directory, go-fuse's loopback example over a local directory,
# a braid mount (`braid up --mount`, six OSDs, default layout), the same
# mount in a directory set to the async write-sync policy (braid-async:
# `braid.sync=async`, durable within a second of close) and JuiceFS
# (../shared/peers/juicefs.sh; skipped if it is not built). braid's close
# makes the file durable on its OSDs (braid-async: within a second); the
# others' do not.
# Needs root (mounts). SMALL=N sets the small-file count (default 2000),
# SRC the tree to untar (default Go's source tree).
set -euo pipefail
SMALL=${SMALL:-2000}
SRC=${SRC:-$(go env GOROOT)/src}
root=$(cd "$(dirname "$0")/.." && pwd)
peers=${PEERS:-$root/../shared/peers}
jfs=${DIR:-$HOME/.cache/braid-peers}/bin/juicefs
work=$(mktemp -d)
bin=$work/braid
uppid=""
lbpid=""
cleanup() {
  [ -n "$lbpid" ] && { umount "$work/lb" 2>/dev/null || true; kill "$lbpid" 2>/dev/null || true; wait "$lbpid" 2>/dev/null || true; }
  [ -x "$jfs" ] && mountpoint -q "$work/jfs" 2>/dev/null && DIR=$work/jfsdir bash "$peers/juicefs.sh" umount "$work/jfs" >/dev/null 2>&1 || true
  [ -n "$uppid" ] && { kill -INT "$uppid" 2>/dev/null || true; wait "$uppid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid && go build -o "$work/loopback-fs" github.com/hanwen/go-fuse/v2/example/loopback)
tar -C "$(dirname "$SRC")" -cf "$work/src.tar" "$(basename "$SRC")"
export XDG_STATE_HOME=$work/state
"$bin" up --dir "$work/cluster" --mount "$work/mnt" >"$work/up.log" 2>&1 &
uppid=$!
mkdir -p "$work/local" "$work/lbsrc" "$work/lb" "$work/jfs"
"$work/loopback-fs" -q -directmount "$work/lb" "$work/lbsrc" >"$work/lb.log" 2>&1 &
lbpid=$!
targets="local loopback braid braid-async"
if [ -x "$jfs" ]; then
  mkdir -p "$work/jfsdir/bin" && ln -s "$jfs" "$work/jfsdir/bin/juicefs"
  DIR=$work/jfsdir bash "$peers/juicefs.sh" mount "$work/jfs" >"$work/jfs.log" 2>&1 && targets="$targets juicefs"
else
  echo "JuiceFS is not built ($jfs): run $peers/juicefs.sh build to compare with it" >&2
fi
for _ in $(seq 300); do
  grep -q '^  mount ' "$work/up.log" && mountpoint -q "$work/lb" && break
  sleep 0.1
done
mountpoint -q "$work/mnt" && mountpoint -q "$work/lb" || { cat "$work/up.log" "$work/lb.log"; exit 1; }
mountpid=$(sed -n 's/^  mount .* (pid \([0-9]*\)).*/\1/p' "$work/up.log" | head -1)
mkdir "$work/mnt/async" && python3 -c "import os, sys; os.setxattr(sys.argv[1], 'braid.sync', b'async')" "$work/mnt/async"

# servers WHERE: the pids whose CPU counts as the file system's own.
servers() {
  case $1 in
  local) ;;
  loopback) echo "$lbpid" ;;
  braid | braid-async) pgrep -P "$uppid" | grep -vx "$mountpid" || true ;;
  juicefs) pgrep -f "juicefs mount.*$work/jfs" || true ;;
  esac
}
# cpu PIDS...: their user+system CPU so far, in seconds.
cpu() {
  local t=0 p
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
  done
  python3 -c "print($t / $(getconf CLK_TCK))"
}
dirof() { case $1 in local) echo "$work/local" ;; loopback) echo "$work/lb" ;; braid) echo "$work/mnt" ;; braid-async) echo "$work/mnt/async" ;; juicefs) echo "$work/jfs" ;; esac; }

# files DIR N SIZE: create+write+close, read, remove rates (files/s).
files() { python3 - "$1" "$2" "$3" <<'PY'
import os, sys, time
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = os.path.join(d, f"small{size}"); os.mkdir(d)
data = os.urandom(size)
names = [os.path.join(d, f"f{i:06d}") for i in range(n)]
def timed(fn):
    t = time.monotonic()
    for p in names: fn(p)
    return n / (time.monotonic() - t)
def create(p):
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    os.write(fd, data); os.close(fd)
def read(p):
    with open(p, "rb") as f:
        assert f.read() == data, p
c = timed(create)
os.system("sync; echo 3 > /proc/sys/vm/drop_caches")
r = timed(read)
x = timed(os.unlink); os.rmdir(d)
print(f"{c:.0f} {r:.0f} {x:.0f}")
PY
}

declare -A res cpus
for where in $targets; do
  dir=$(dirof "$where")
  for size in 4096 65536; do
    # shellcheck disable=SC2046
    c0=$(cpu $(servers "$where"))
    res[$where,$size]=$(files "$dir" "$SMALL" "$size")
    # shellcheck disable=SC2046
    cpus[$where,$size]=$(python3 -c "print(f'{($(cpu $(servers "$where")) - $c0) * 1e3 / $SMALL:.2f}')")
  done
  # shellcheck disable=SC2046
  c0=$(cpu $(servers "$where"))
  t0=$(date +%s.%N)
  mkdir "$dir/untar" && tar -C "$dir/untar" -xf "$work/src.tar" && sync -f "$dir/untar"
  t1=$(date +%s.%N)
  # shellcheck disable=SC2046
  c1=$(cpu $(servers "$where"))
  rm -rf "$dir/untar"
  t2=$(date +%s.%N)
  # shellcheck disable=SC2046
  c2=$(cpu $(servers "$where"))
  res[$where,tar]=$(python3 -c "print(f'{$t1 - $t0:.1f} {$c1 - $c0:.1f} {$t2 - $t1:.1f} {$c2 - $c1:.1f}')")
done

nfiles=$(tar -tf "$work/src.tar" | grep -vc '/$')
echo "$SMALL files of 4 KiB and of 64 KiB (files/s), and an untar of $SRC ($nfiles files, $(($(stat -c %s "$work/src.tar") >> 20)) MiB) with syncfs, then rm -rf"
echo
echo "| workload | $(echo "$targets" | sed 's/ / | /g') |"
echo "|---|$(for _ in $targets; do printf -- '---|'; done)"
row() { # label field-index source
  printf '| %s |' "$1"
  for w in $targets; do printf ' %s |' "$(echo "${res[$w,$3]}" | cut -d' ' -f"$2")"; done
  echo
}
row "4 KiB: create, write, close (files/s)" 1 4096
row "4 KiB: read (files/s)" 2 4096
row "4 KiB: remove (files/s)" 3 4096
row "64 KiB: create, write, close (files/s)" 1 65536
row "64 KiB: read (files/s)" 2 65536
row "64 KiB: remove (files/s)" 3 65536
row "untar + syncfs (s)" 1 tar
row "  server CPU for it (s)" 2 tar
row "rm -rf (s)" 3 tar
row "  server CPU for it (s)" 4 tar
printf '| server CPU per 4 KiB file: create, read, remove (ms) |'
for w in $targets; do printf ' %s |' "${cpus[$w,4096]}"; done
echo
