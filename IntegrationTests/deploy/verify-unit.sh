#!/usr/bin/env bash
# Checks samples/topicledger.service with `systemd-analyze verify`: every setting known to this systemd, the
# commands it runs present and executable. The unit runs /usr/local/bin/ledger, so the built binary stands there
# for the check (a symlink made and removed here when nothing is there already).
#   IntegrationTests/deploy/verify-unit.sh LEDGER_BINARY
set -euo pipefail
cd "$(dirname "$0")/../.."
binary="$(realpath "${1:?usage: verify-unit.sh LEDGER_BINARY}")"
if ! command -v systemd-analyze >/dev/null; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
    else
        echo "error: the unit check needs systemd-analyze. Install it with: sudo apt-get install -y systemd" >&2
        exit 1
    fi
fi
placed=""
if [ ! -e /usr/local/bin/ledger ]; then
    mkdir -p /usr/local/bin
    ln -s "$binary" /usr/local/bin/ledger
    placed=/usr/local/bin/ledger
fi
trap '[ -n "$placed" ] && rm -f "$placed"' EXIT
output="$(systemd-analyze verify samples/topicledger.service 2>&1)" || { echo "$output" >&2; exit 1; }
# verify exits 0 on some findings (an unknown setting is a warning): any line it prints about the unit fails.
if grep -q "topicledger.service" <<<"$output"; then
    echo "$output" >&2
    exit 1
fi
echo "samples/topicledger.service: systemd-analyze verify found nothing"
