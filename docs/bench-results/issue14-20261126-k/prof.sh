#!/usr/bin/env bash
# prof.sh BIN healthz|subscribe OUT : fresh server, wrk 8s, perf record 5s in the middle
set -euo pipefail
binary=$1; workload=$2; out=$3
source /work/main/tools/bench/fresh-server.sh
start "$binary"
case "$workload" in
  healthz) (wrk -t1 -c64 -d8s "http://127.0.0.1:$port/healthz" > $out.wrk) & wrkpid=$! ;;
  batchadd) (wrk -t1 -c8 -d8s -s "$scripts/batchadd.lua" "http://127.0.0.1:$port" > $out.wrk) & wrkpid=$! ;;
  subscribe) (wrk -t1 -c64 -d8s -s "$scripts/subscribe.lua" "http://127.0.0.1:$port" > $out.wrk) & wrkpid=$! ;;
esac
sleep 2
perf record -F 999 --call-graph dwarf,16384 -p "$server" -o $out.data -- sleep 5 2>/dev/null >/dev/null
wait $wrkpid
