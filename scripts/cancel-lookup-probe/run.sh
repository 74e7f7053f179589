#!/usr/bin/env bash
# Usage: run.sh CACHE PROCESSES [TASKS] [--log]   (CACHE: none, async, logged, immediate)
# Builds the probe, starts nginx on 127.0.0.1:18046 (serving /json and a 1 MiB file) and two busy loops, then runs
# PROCESSES probe processes one after the other; prints how many crashed. Logs of crashed processes stay in $OUT.
set -euo pipefail
cache=$1; processes=$2; tasks=${3:-3000}; extra=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/cancel-lookup-probe}; mkdir -p "$OUT/www/files" "$OUT/logs"
[ -x "$OUT/probe" ] || swiftc -O -swift-version 5 "$here/probe.swift" -o "$OUT/probe"
printf '{"name":"storm","ingredients":["a","b"],"steps":["c"]}\n' > "$OUT/www/json"
[ -f "$OUT/www/files/storm-1m.bin" ] || head -c 1048576 /dev/urandom > "$OUT/www/files/storm-1m.bin"
cat > "$OUT/nginx.conf" <<CONF
worker_processes 1; daemon off; pid $OUT/nginx.pid; error_log $OUT/nginx-error.log;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 100000;
  server { listen 127.0.0.1:18046; root $OUT/www; location /json { default_type application/json; } } }
CONF
nginx -c "$OUT/nginx.conf" -p "$OUT" & nginx_pid=$!
( while :; do :; done ) & spin1=$!
( while :; do :; done ) & spin2=$!
trap 'kill $spin1 $spin2 $nginx_pid 2>/dev/null || true' EXIT
sleep 0.5
crashed=0
for i in $(seq 1 "$processes"); do
  log="$OUT/logs/$cache-$i.log"
  if "$OUT/probe" --cache "$cache" --tasks "$tasks" $extra > "$OUT/logs/$cache-$i.out" 2> "$log"; then rm -f "$log"; else crashed=$((crashed + 1)); echo "process $i: crashed ($(grep -m1 -o 'Fatal error.*' "$log" || tail -1 "$log")), log $log"; fi
done
echo "cache=$cache processes=$processes tasks=$tasks crashed=$crashed"
