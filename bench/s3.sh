#!/usr/bin/env bash
# S3 streaming check: a large object (SIZE_GIB, default 4) written and read
# through `braid up --s3` by the AWS CLI (multipart, 8 MiB parts, 10
# concurrent requests), next to braid put / get of the same file. Prints
# both times and the gateway's peak resident memory (VmHWM), which stays
# far below the object size: nothing holds an object in memory.
set -euo pipefail
SIZE_GIB=${SIZE_GIB:-4}

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
bin=$work/braid
cleanup() { kill -INT $uppid 2>/dev/null; wait $uppid 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
(cd "$root" && go build -o "$bin" ./cmd/braid)
export XDG_STATE_HOME=$work/state
"$bin" up --dir "$work/cluster" --s3 127.0.0.1:0 >"$work/up.log" 2>&1 &
uppid=$!
for _ in $(seq 300); do grep -q '^  s3 ' "$work/up.log" && break; sleep 0.1; done
ep=$(sed -n 's/^  s3    \(http:[^ ]*\).*/\1/p' "$work/up.log")
s3pid=$(sed -n 's/^  s3 .*(pid \([0-9]*\)).*/\1/p' "$work/up.log")
read -r access secret < <("$bin" s3 user add bench --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["access_key"], d["secret_key"])')
export AWS_ACCESS_KEY_ID=$access AWS_SECRET_ACCESS_KEY=$secret AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null
aws() { command aws --endpoint-url "$ep" "$@"; }

head -c $((SIZE_GIB << 30)) /dev/urandom >"$work/obj"
secs() { local t=$(date +%s.%N); "$@" >/dev/null; python3 -c "import sys; print(f'{$(date +%s.%N)-$t:.2f}')"; }
aws s3 mb s3://bench >/dev/null
put_s3=$(secs aws s3 cp "$work/obj" s3://bench/obj)
get_s3=$(secs aws s3 cp s3://bench/obj "$work/back")
cmp "$work/obj" "$work/back"
rm "$work/back"
put_lib=$(secs "$bin" put "$work/obj" /bench/lib)
get_lib=$(secs "$bin" get /bench/lib "$work/back")
cmp "$work/obj" "$work/back"
hwm=$(awk '/VmHWM/ {print $2}' /proc/$s3pid/status)
gib() { python3 -c "print(f'{$SIZE_GIB/$1:.2f}')"; }
echo "object ${SIZE_GIB} GiB     aws s3 cp         braid put/get     ratio"
echo "PUT                $(gib $put_s3) GiB/s ($put_s3 s)  $(gib $put_lib) GiB/s ($put_lib s)  $(python3 -c "print(f'{$put_lib/$put_s3:.2f}x')")"
echo "GET                $(gib $get_s3) GiB/s ($get_s3 s)  $(gib $get_lib) GiB/s ($get_lib s)  $(python3 -c "print(f'{$get_lib/$get_s3:.2f}x')")"
echo "gateway peak RSS   $((hwm / 1024)) MiB"
