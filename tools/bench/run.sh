#!/usr/bin/env bash
# Builds the benchmark harness in release mode and runs it.
#   tools/bench/run.sh            quick mode (under 2 minutes of workloads, plus the release build)
#   tools/bench/run.sh full       full mode (about 20 minutes of workloads)
# Results: a table on stdout and tools/bench/results/<mode>-<timestamp>.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/install-deps.sh
# The peers of the comparison: Redis (redis-server) and SQLite (libsqlite3-dev); wrk drives the HTTP workloads.
missing=""
command -v redis-server >/dev/null || missing="$missing redis-server"
command -v wrk >/dev/null || missing="$missing wrk"
pkg-config --exists sqlite3 2>/dev/null || missing="$missing libsqlite3-dev"
if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing$missing" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
        echo "error: the benchmark's peers are missing. Install them with: sudo apt-get install -y$missing" >&2
        exit 1
    fi
fi
mode="${1:-quick}"
export TOPICLEDGER_BENCH=1
swift build -c release --scratch-path .build-bench --product LedgerBench
swift build -c release --scratch-path .build-bench --product ledger
mkdir -p tools/bench/results
out="tools/bench/results/${mode}-$(date -u +%Y%m%dT%H%M%SZ).json"
.build-bench/release/LedgerBench --mode "$mode" --json "$out"
echo "results: $out"
