#!/usr/bin/env bash
# The FCM topic-messaging guide's scenarios, end to end against a fresh server:
#   1. devices subscribe to "weather"; a send to the topic reaches exactly them;
#   2. a send to 'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics) reaches exactly the
#      devices whose topics satisfy it — shown by each device's inbox and by `ledger replay`.
# Usage: samples/seeds-scenario.sh   (builds `ledger` and `ledger-device`, uses a temporary data directory)
set -euo pipefail
cd "$(dirname "$0")/.."
swift build --product ledger >/dev/null
swift build --product ledger-device >/dev/null
bin="$(swift build --show-bin-path)"
data="$(mktemp -d)"
server=""
trap 'if [ -n "$server" ]; then kill $server 2>/dev/null; wait $server 2>/dev/null; fi; rm -rf "$data"' EXIT
# Start the server on a port the kernel says is free; if it still cannot bind (a race with another
# process), it exits and we try another port. Wait up to 60 s for it to answer: CI machines can be slow.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for try in 1 2 3; do
  port=$(free_port)
  server_url="http://127.0.0.1:$port"
  "$bin/ledger" serve --data "$data" --port "$port" >"$data/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    curl -sf "$server_url/healthz" >/dev/null && break 2
    kill -0 $server 2>/dev/null || break
    sleep 0.1
  done
  echo "ledger serve did not answer on port $port (try $try); its log:" >&2
  cat "$data/server.log" >&2
  kill $server 2>/dev/null; wait $server 2>/dev/null
  server=""
  if [ "$try" -eq 3 ]; then echo "FAIL: the server never came up" >&2; exit 1; fi
done
# Each device is a store file, as each app install keeps its token and topics (TopicLedgerMessaging).
device() { local name=$1; shift; "$bin/ledger-device" "$@" --server "$server_url" --store "$data/$name.json"; }
send() {  # the backend: firebase-admin would do the same with messaging.send(...)
  curl -sf -X POST "$server_url/v1/projects/demo-project/messages:send" -H 'Authorization: Bearer owner' \
    -H 'content-type: application/json' -d "$1" | sed -e 's/.*messages\///' -e 's/".*//'
}

declare -A token
for name in alice bob carol dave; do
  token[$name]=$(device $name register --platform ios)
  [[ "${token[$name]}" == [c-f]*:APA91b* ]] || { echo "FAIL: register gave \"${token[$name]}\"" >&2; exit 1; }
done
device alice subscribe weather TopicA TopicB
device bob subscribe weather TopicA
device carol subscribe TopicA TopicC TopicD
device carol unsubscribe TopicD
device dave subscribe TopicB
echo "alice: weather TopicA TopicB | bob: weather TopicA | carol: TopicA TopicC | dave: TopicB"

# Alice listens with Server-Sent Events while the messages are sent.
device alice stream --count 2 >"$data/alice-stream.jsonl" &
streaming=$!
sleep 0.5

weather=$(send '{"message":{"topic":"weather","notification":{"title":"Storm warning","body":"Heavy rain from 14:00"}}}')
condition="'TopicA' in topics && ('TopicB' in topics || 'TopicC' in topics)"
goal=$(send "{\"message\":{\"condition\":\"$condition\",\"data\":{\"score\":\"5x1\"}}}")
wait $streaming
echo
echo "sent weather=$weather and condition=$goal"
echo "alice's stream received: $(sed -e 's/.*"messageId":"\([0-9]*\)".*/\1/' "$data/alice-stream.jsonl" | tr '\n' ' ')"
declare -A expected=([alice]="$weather $goal " [bob]="$weather " [carol]="$goal " [dave]="")
for name in alice bob carol dave; do
  ids=$(device $name poll --ack | sed -e 's/.*"messageId":"\([0-9]*\)".*/\1/' | tr '\n' ' ')
  printf '%-6s inbox: %s\n' "$name" "${ids:-(nothing)}"
  if [ "$ids" != "${expected[$name]}" ]; then echo "FAIL: $name should have received: ${expected[$name]:-nothing}" >&2; exit 1; fi
done
echo
echo "Who the condition message was addressed to, reconstructed from the ledger (and who acknowledged):"
"$bin/ledger" replay --data "$data" --message "$goal"   # exits 2 unless it matches the recorded audience
