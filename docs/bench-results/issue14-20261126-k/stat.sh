#!/usr/bin/env bash
set -euo pipefail
binary=$1; workload=$2; out=$3
source /work/main/tools/bench/fresh-server.sh
start "$binary"
case "$workload" in
  healthz) (wrk -t1 -c64 -d8s "http://127.0.0.1:$port/healthz" > $out.wrk) & wrkpid=$! ;;
  subscribe) (wrk -t1 -c64 -d8s -s "$scripts/subscribe.lua" "http://127.0.0.1:$port" > $out.wrk) & wrkpid=$! ;;
esac
sleep 2
perf stat --per-thread -e 'syscalls:sys_enter_futex,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_read,syscalls:sys_enter_pwrite64,syscalls:sys_enter_fdatasync,context-switches' -p "$server" -o $out.stat -- sleep 5 
wait $wrkpid
