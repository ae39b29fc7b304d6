#!/usr/bin/env bash
# prof.sh LEDGER_BINARY healthz|subscribe|batchadd OUT [record|stat]
# A fresh server (tools/bench/fresh-server.sh: 8,000 devices), 8 s of wrk -t1 (64 connections; batchadd 8), and
# 2 s into it 5 s of `perf record` (DWARF stacks, OUT.data) or of `perf stat` of system calls per thread (OUT.stat).
# wrk's report goes to OUT.wrk. cat.py and near.py read `perf script -i OUT.data > OUT.txt`.
set -euo pipefail
binary=$1; workload=$2; out=$3; mode=${4:-record}
source /work/main/tools/bench/fresh-server.sh
start "$binary"
case "$workload" in
  healthz) (wrk -t1 -c64 -d8s "http://127.0.0.1:$port/healthz" > "$out.wrk") & wrkpid=$! ;;
  batchadd) (wrk -t1 -c8 -d8s -s "$scripts/batchadd.lua" "http://127.0.0.1:$port" > "$out.wrk") & wrkpid=$! ;;
  subscribe) (wrk -t1 -c64 -d8s -s "$scripts/subscribe.lua" "http://127.0.0.1:$port" > "$out.wrk") & wrkpid=$! ;;
esac
sleep 2
case "$mode" in
  record) perf record -F 999 --call-graph dwarf,16384 -p "$server" -o "$out.data" -- sleep 5 >/dev/null 2>&1 ;;
  stat) perf stat --per-thread -o "$out.stat" -p "$server" -e 'syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_read,syscalls:sys_enter_pwrite64,syscalls:sys_enter_fdatasync,context-switches' -- sleep 5 ;;
esac
wait $wrkpid
