#!/usr/bin/env bash
# Property-based API testing: schemathesis (PyPI) generates requests from docs/openapi.yaml and sends them to a
# fresh `ledger serve`; every response must be no 5xx and match the contract (status, content type, schema,
# headers). Afterwards `ledger verify` must find the ledger sound.
#   IntegrationTests/schemathesis/run.sh LEDGER_BINARY [SECONDS]      default 60 s of generation
set -euo pipefail
cd "$(dirname "$0")/../.."
binary="${1:?usage: IntegrationTests/schemathesis/run.sh LEDGER_BINARY [SECONDS]}"
seconds="${2:-60}"
python3 -m pip install --quiet --disable-pip-version-check "schemathesis==4.32.5"
data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$binary" serve --data "$data" --port "$port" --registration-rate 100000 --subscription-rate 100000 \
    > "$data/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
base="http://127.0.0.1:$port"
export DEVICE_TOKEN=$(curl -sf -X POST "$base/v1/projects/demo-project/registrations" -H "x-goog-api-key: dev-client-key" \
    -H "content-type: application/json" -d '{"platform":"ios"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
curl -sf -X POST "$base/v1/projects/demo-project/registrations/$DEVICE_TOKEN/topicSubscriptions?topicName=news" \
    -H "Authorization: Bearer owner" -H "content-type: application/json" -d '{}' >/dev/null
started=$(date +%s)
status=0
# From the scratch directory: schemathesis keeps its cache (.schemathesis/) in the working directory.
root=$(pwd)
(cd "$data" && schemathesis --config-file "$root/IntegrationTests/schemathesis/schemathesis.toml" run "$root/docs/openapi.yaml" --url "$base" \
    -H "Authorization: Bearer owner" -H "x-goog-api-key: dev-client-key" --max-time "$seconds" \
    -c not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance \
    --no-color > "$data/schemathesis.log" 2>&1) || status=$?
grep -E "generated|passed|failures|Failures|❌" "$data/schemathesis.log" || true
echo "schemathesis: $(( $(date +%s) - started )) s, exit $status"
if [ "$status" -ne 0 ]; then tail -80 "$data/schemathesis.log"; tail -20 "$data/server.log"; exit "$status"; fi
kill $server; wait $server 2>/dev/null || true
trap - EXIT
"$binary" verify --data "$data"
rm -rf "$data"
