#!/usr/bin/env bash
# Large directory listing: FILES (default 1,000,000) empty files in one
# directory, created through the client library (`braid bench --fill`,
# 8 clients), then listed completely three ways, each timed and counted:
#   - through the mount (`ls -f`, after dropping the kernel's caches),
#   - `braid ls`,
#   - S3 ListObjectsV2 through the gateway (boto3's paginator, 1,000 keys
#     a page).
# Every listing must count exactly FILES entries. Needs root (mounts).
set -euo pipefail
FILES=${FILES:-1000000}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
bin=$work/braid
mnt=$work/mnt
uppid=""
cleanup() {
  [ -n "$uppid" ] && { kill -INT "$uppid" 2>/dev/null || true; wait "$uppid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid)
export XDG_STATE_HOME=$work/state
"$bin" up --dir "$work/cluster" --mount "$mnt" --s3 127.0.0.1:0 >"$work/up.log" 2>&1 &
uppid=$!
for _ in $(seq 300); do
  grep -q '^  mount ' "$work/up.log" && grep -q '^  s3 ' "$work/up.log" && break
  sleep 0.1
done
mountpoint -q "$mnt" || { cat "$work/up.log"; exit 1; }
ep=$(sed -n 's/^  s3    \(http:[^ ]*\).*/\1/p' "$work/up.log")
read -r access secret < <("$bin" s3 user add bench --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["access_key"], d["secret_key"])')

"$bin" bench --fill /big/dir --files "$FILES" --workers 8

secs() { python3 -c "import time; print(time.monotonic())"; }
check() { # name count seconds
  [ "$2" -eq "$FILES" ] || { echo "$1 listed $2 of $FILES entries"; exit 1; }
  python3 -c "print(f'| $1 | {$2:,} | {$3:.1f} s | {$2/$3:,.0f} |')"
}
echo
echo "| listing | entries | time | entries/s |"
echo "|---|---|---|---|"
sync; echo 2 >/proc/sys/vm/drop_caches
t=$(secs); n=$(ls -f "$mnt/big/dir" | grep -cv '^\.\.\?$'); check "mount (ls -f)" "$n" "$(python3 -c "import time; print(time.monotonic()-$t)")"
t=$(secs); n=$("$bin" ls /big/dir | wc -l); check "braid ls" "$n" "$(python3 -c "import time; print(time.monotonic()-$t)")"
t=$(secs); n=$(python3 - "$ep" "$access" "$secret" <<'PY'
import sys, boto3
ep, ak, sk = sys.argv[1:]
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id=ak, aws_secret_access_key=sk, region_name="us-east-1")
n = 0
for page in s3.get_paginator("list_objects_v2").paginate(Bucket="big", Prefix="dir/"):
    n += page.get("KeyCount", 0)
print(n)
PY
)
check "S3 ListObjectsV2" "$n" "$(python3 -c "import time; print(time.monotonic()-$t)")"
