#!/usr/bin/env bash
# `make demo`: loads the sample operations into ./ledger-data once, then shows the ledger's state and
# verifies it.
set -euo pipefail
cd "$(dirname "$0")/.."
ledger="$(swift build --show-bin-path)/ledger"
if ! "$ledger" stats --data ./ledger-data >/dev/null 2>&1; then
    "$ledger" import --data ./ledger-data samples/demo-operations.jsonl
fi
"$ledger" stats --data ./ledger-data
"$ledger" verify --data ./ledger-data
echo
echo "Try: $ledger log --data ./ledger-data | head"
