#!/usr/bin/env bash
# What a reader of one instance's topics pays while memberships wait on the recent side: for each binary in
# turn, a fresh ledger with 8,000 registered devices, 6 s of batchAdd (wrk -t1 -c8, so each device holds a few
# hundred topics, many of them waiting to move), then 2,000 sequential `GET /iid/info/{token}?details=true` on
# one keep-alive connection; prints the mean time per request. Compare binaries in the same run.
#   tools/bench/instance-read.sh LEDGER_BINARY [LEDGER_BINARY ...]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: tools/bench/instance-read.sh LEDGER_BINARY [LEDGER_BINARY ...]" >&2; exit 1; }
source "$(dirname "$0")/fresh-server.sh"
for binary in "$@"; do
    start "$binary"
    batchadd=$(wrk -t1 -c8 -d6s -s "$scripts/batchadd.lua" "http://127.0.0.1:$port" | awk '/Requests\/sec/ {print $2}')
    python3 - "$port" "$LEDGER_BENCH_TOKENS" "$binary" "$batchadd" <<'PY'
import http.client, json, sys, time
port, tokens, binary, batchadd = int(sys.argv[1]), open(sys.argv[2]).read().split(), sys.argv[3], sys.argv[4]
connection = http.client.HTTPConnection("127.0.0.1", port)
def info(token):
    connection.request("GET", "/iid/info/" + token + "?details=true", headers={"Authorization": "Bearer owner"})
    response = connection.getresponse()
    body = response.read()
    assert response.status == 200, (response.status, body[:200])
    return json.loads(body)
held = [len(info(tokens[i]).get("rel", {}).get("topics", {})) for i in range(0, len(tokens), 800)]
started = time.perf_counter()
for i in range(2000):
    info(tokens[(i * 37) % len(tokens)])
mean = (time.perf_counter() - started) / 2000 * 1e6
print(f"{binary}: batchAdd {batchadd} requests/s; devices hold {min(held)}-{max(held)} topics; iid/info {mean:.0f} µs per request")
PY
done
