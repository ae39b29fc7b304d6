#!/usr/bin/env bash
# The cluster suite: three etcd members and three `ledger serve` nodes on loopback, and the faults of
# docs/cluster.md (kill -9 of the leader, a paused leader, an etcd member lost, a node down and back, a node
# joining, a node cut off by network namespaces).
#   tools/cluster/run.sh [LEDGER_BINARY] [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")"
binary="${1:-$(cd ../.. && swift build --show-bin-path)/ledger}"
command -v etcd >/dev/null || { echo "etcd is missing: apt-get install -y etcd-server etcd-client" >&2; exit 1; }
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
shift $(( $# > 0 ? 1 : 0 ))
LEDGER_BIN="$binary" python3 -m pytest -q -p no:cacheprovider -x . "$@"
