#!/usr/bin/env bash
# Builds the benchmark harness in release mode and runs it.
#   tools/bench/run.sh            quick mode (about 2.5 minutes with the release build)
#   tools/bench/run.sh full       full mode
# Results: a table on stdout and tools/bench/results/<mode>-<timestamp>.json.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/install-deps.sh
mode="${1:-quick}"
export TOPICLEDGER_BENCH=1
swift build -c release --scratch-path .build-bench --product LedgerBench
swift build -c release --scratch-path .build-bench --product ledger
mkdir -p tools/bench/results
out="tools/bench/results/${mode}-$(date -u +%Y%m%dT%H%M%SZ).json"
.build-bench/release/LedgerBench --mode "$mode" --json "$out"
echo "results: $out"
