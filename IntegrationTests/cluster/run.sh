#!/usr/bin/env bash
# The cluster suite: three etcd members and three `ledger serve` nodes on loopback, and the faults of
# docs/cluster.md (kill -9 of the leader, a paused leader, an etcd member lost, a node down and back, a node
# joining, a node cut off by network namespaces).
#   IntegrationTests/cluster/run.sh [LEDGER_BINARY] [pytest arguments]
set -euo pipefail
cd "$(dirname "$0")"
binary="${1:-$(cd ../.. && swift build --show-bin-path)/ledger}"
# etcd (3.4, Debian's), etcdctl, curl, and iproute2 and iptables for the namespace case.
packages="etcd-server etcd-client curl iproute2 iptables"
missing=""
for command in etcd etcdctl curl ip iptables; do command -v "$command" >/dev/null || missing=yes; done
if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing $packages" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
    else
        echo "error: the cluster suite needs etcd. Install it with: sudo apt-get install -y $packages" >&2
        exit 1
    fi
fi
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
shift $(( $# > 0 ? 1 : 0 ))
LEDGER_BIN="$binary" python3 -m pytest -q -p no:cacheprovider -x . "$@"
