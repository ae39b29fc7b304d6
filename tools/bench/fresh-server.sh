# Sourced by tools/bench/cpu-per-request.sh and cpu-by-thread.sh: a scratch directory, a port, and `start
# BINARY`, which (re)starts `BINARY serve` on a fresh ledger with 8,000 registered devices (their tokens in
# $LEDGER_BENCH_TOKENS for the wrk scripts) and sets $server to its pid. The server and the directory go when
# the script exits.
command -v wrk >/dev/null || { echo "error: wrk is missing: apt-get install -y wrk" >&2; exit 1; }
scripts="$(cd "$(dirname "${BASH_SOURCE[0]}")/wrk" && pwd)"
work=$(mktemp -d)
port=$((18000 + RANDOM % 4000))
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; rm -rf "$work"' EXIT
export LEDGER_BENCH_TOKENS="$work/tokens"

start() { # binary: a fresh ledger, 8000 devices registered
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true
    rm -rf "$work/data"
    "$1" serve --data "$work/data" --port "$port" --subscription-rate 1000000000 --send-quota 1000000000 \
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
}
