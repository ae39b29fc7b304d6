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
command -v wrk >/dev/null || { echo "error: wrk is missing: apt-get install -y wrk" >&2; exit 1; }
scripts="$(cd "$(dirname "$0")/wrk" && pwd)"
work=$(mktemp -d)
port=$((20000 + RANDOM % 2000))
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; rm -rf "$work"' EXIT
export LEDGER_BENCH_TOKENS="$work/tokens"

"$binary" serve --data "$work/data" --port "$port" --subscription-rate 1000000000 --send-quota 1000000000 \
    --registration-rate 1000000000 >/dev/null 2>&1 &
server=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
python3 - "http://127.0.0.1:$port" "$LEDGER_BENCH_TOKENS" <<'PY'
import concurrent.futures, json, sys, urllib.request
def register(_):
    request = urllib.request.Request(sys.argv[1] + "/v1/projects/demo-project/registrations", data=b"{}",
        method="POST", headers={"x-goog-api-key": "dev-client-key", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(request))["token"]
with concurrent.futures.ThreadPoolExecutor(16) as pool:
    open(sys.argv[2], "w").write("\n".join(pool.map(register, range(8000))))
PY

ticks() { # "thread-name ticks" per thread name (spaces in names become _)
    for task in /proc/"$server"/task/*; do
        echo "$(tr ' ' _ < "$task/comm") $(awk '{print $14 + $15}' "$task/stat")"
    done | awk '{sum[$1] += $2} END {for (name in sum) print name, sum[name]}' | sort
}
ticks > "$work/before"
case "$workload" in
    healthz) out=$(wrk -t1 -c"$connections" -d"${seconds}s" "http://127.0.0.1:$port/healthz") ;;
    subscribe) out=$(wrk -t1 -c"$connections" -d"${seconds}s" -s "$scripts/subscribe.lua" "http://127.0.0.1:$port") ;;
    *) echo "error: unknown workload $workload (healthz or subscribe)" >&2; exit 1 ;;
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
