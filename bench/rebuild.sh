#!/usr/bin/env bash
# Rebuild benchmark: time to restore full redundancy after one OSD of a
# 6-OSD cluster holding 2 GiB of ec:4+2 data is SIGKILLed, next to the time
# to copy that much data into braid once (braid put, durable).
#
#   bench/rebuild.sh            # SIZE_MIB=2048 FILES=8 OUT_AFTER=10s
#
# The rebuild time is counted from the moment the OSD is declared out
# (kill + OUT_AFTER) until `braid status` reports health ok with nothing
# left to repair. Needs go and python3.
set -euo pipefail
SIZE_MIB=${SIZE_MIB:-2048}
FILES=${FILES:-8}
OUT_AFTER=${OUT_AFTER:-10s}
REPAIR_RATE=${REPAIR_RATE:-1GiB}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
bin=$work/braid
trap 'kill $uppid 2>/dev/null; wait $uppid 2>/dev/null; rm -rf "$work"' EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid)
export XDG_STATE_HOME=$work/state
"$bin" up --dir "$work/cluster" --osds 6 --osd-out-after "$OUT_AFTER" --repair-rate "$REPAIR_RATE" >"$work/up.log" 2>&1 &
uppid=$!
for _ in $(seq 300); do [ -s "$XDG_STATE_HOME/braid/cluster.json" ] && break; sleep 0.1; done
now() { date +%s.%N; }
json() { "$bin" status --json | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)"; }

per=$((SIZE_MIB / FILES))
head -c $((per << 20)) /dev/urandom >"$work/src"
t0=$(now)
for i in $(seq "$FILES"); do "$bin" put "$work/src" "/f$i" --layout ec:4+2 >/dev/null; done
t1=$(now)
copy=$(python3 -c "print(f'{$t1-$t0:.1f}')")
echo "copy ${SIZE_MIB} MiB into braid (ec:4+2, durable): ${copy} s"

victim=$(json "[o['pid'] for o in s['osds'] if o['state']=='up'][0]")
kill -9 "$victim"
tk=$(now)
out_s=$(python3 -c "import re; m=re.match(r'(\d+)s', '$OUT_AFTER'); print(m.group(1))")
while :; do
  sleep 0.2
  ok=$(json "s['health']=='ok' and s['repair']['files_left']==0 and s['repair']['active']==0 and any(o['state']=='out' for o in s['osds'])")
  [ "$ok" = True ] && break
done
t2=$(now)
rebuild=$(python3 -c "print(f'{$t2-$tk-$out_s:.1f}')")
echo "restore full redundancy after the OSD is out: ${rebuild} s (plus the ${OUT_AFTER} grace period)"
python3 -c "print(f'rebuild / copy = {$rebuild/$copy:.2f}')"
"$bin" status | sed -n '1,12p'
