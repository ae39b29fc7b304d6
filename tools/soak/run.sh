#!/usr/bin/env bash
# Soak test: `ledger serve` (a fresh data directory) under mixed load — wrk on subscribe/unsubscribe/send, SSE
# connections that come and go, long polls that acknowledge — for MINUTES (default 30), sampling RSS, open fds
# and the /healthz p99 every 10 s. Writes tools/soak/results/soak-<time>.csv and .png, then checks that the
# ledger verifies.
#   tools/soak/run.sh LEDGER_BINARY [MINUTES]
set -euo pipefail
cd "$(dirname "$0")/../.."
binary="${1:?usage: tools/soak/run.sh LEDGER_BINARY [MINUTES]}"
minutes="${2:-30}"
command -v wrk >/dev/null || {
    if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
    else echo "error: wrk is missing. Install it with: sudo apt-get install -y wrk" >&2; exit 1; fi
}
python3 -m pip install --quiet --disable-pip-version-check requests matplotlib
data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$binary" serve --data "$data" --port "$port" --registration-rate 100000 --subscription-rate 1000000 \
    --send-quota 100000000 > "$data/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
mkdir -p tools/soak/results
out="tools/soak/results/soak-$(date -u +%Y%m%dT%H%M%SZ)"
python3 tools/soak/soak.py --base "http://127.0.0.1:$port" --pid "$server" --minutes "$minutes" \
    --out "$out.csv" --wrk-script tools/soak/mixed.lua --ledger-file "$data/demo-project/data.mdb"
python3 tools/soak/plot.py "$out.csv" "$out.png"
kill -TERM $server
wait $server || true
trap - EXIT
"$binary" verify --data "$data"
echo "results: $out.csv $out.png"
