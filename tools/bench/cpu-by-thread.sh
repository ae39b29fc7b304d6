#!/usr/bin/env bash
# The server's CPU time per request, by thread (event loops, the request pool, the writer, …), for one
# workload: a fresh ledger with 8,000 registered devices, one wrk run (-t1), then the user + system ticks
# of each of the server's threads (/proc/PID/task/*/stat), summed by thread name, divided by the requests.
#   tools/bench/cpu-by-thread.sh LEDGER_BINARY healthz|subscribe [CONNECTIONS] [SECONDS]
set -euo pipefail
binary="${1:?usage: tools/bench/cpu-by-thread.sh LEDGER_BINARY healthz|subscribe [CONNECTIONS] [SECONDS]}"
workload="${2:?usage: tools/bench/cpu-by-thread.sh LEDGER_BINARY healthz|subscribe [CONNECTIONS] [SECONDS]}"
connections="${3:-64}"
seconds="${4:-6}"
case "$workload" in healthz | subscribe) ;; *) echo "error: unknown workload $workload (healthz or subscribe)" >&2; exit 1 ;; esac
source "$(dirname "$0")/fresh-server.sh"
start "$binary"

ticks() { # "thread-name ticks" per thread name (spaces in names become _)
    for task in /proc/"$server"/task/*; do
        echo "$(tr ' ' _ < "$task/comm") $(awk '{print $14 + $15}' "$task/stat")"
    done | awk '{sum[$1] += $2} END {for (name in sum) print name, sum[name]}' | sort
}
ticks > "$work/before"
case "$workload" in
    healthz) out=$(wrk -t1 -c"$connections" -d"${seconds}s" "http://127.0.0.1:$port/healthz") ;;
    subscribe) out=$(wrk -t1 -c"$connections" -d"${seconds}s" -s "$scripts/subscribe.lua" "http://127.0.0.1:$port") ;;
esac
sleep 1 # queued work finishes
ticks > "$work/after"
if echo "$out" | grep -q "Non-2xx"; then echo "error: $workload had answers that were not 2xx" >&2; exit 1; fi
requests=$(echo "$out" | awk '/requests in/ {print $1}')
echo "$workload: $(echo "$out" | awk '/Requests\/sec/ {print $2}') requests/s"
join "$work/before" "$work/after" | python3 -c '
import os, sys
requests = int(sys.argv[1]); tick = 1e6 / os.sysconf("SC_CLK_TCK"); total = 0
for line in sys.stdin:
    name, before, after = line.split(); spent = (int(after) - int(before)) * tick / requests
    total += spent
    if spent > 0: print(f"  {name} {spent:.1f} µs/request")
print(f"  total {total:.1f} µs/request")' "$requests"
