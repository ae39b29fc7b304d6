#!/usr/bin/env bash
# Fuzzes the condition parser with libFuzzer (AddressSanitizer on), for a bounded time.
#   tools/fuzz/run.sh [SECONDS]      default 60; extra libFuzzer flags via FUZZ_FLAGS
# Findings (crashing inputs) are written to tools/fuzz/findings/. Exit status 0 means no crash.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/install-deps.sh
seconds="${1:-60}"
export TOPICLEDGER_FUZZ=1
swift build -c release --scratch-path .build-fuzz --product ConditionFuzzer \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld -Xlinker --allow-multiple-definition
mkdir -p tools/fuzz/findings .build-fuzz/corpus
cp tools/fuzz/corpus/* .build-fuzz/corpus/
.build-fuzz/release/ConditionFuzzer .build-fuzz/corpus -max_total_time="$seconds" -max_len=512 \
    -artifact_prefix=tools/fuzz/findings/ ${FUZZ_FLAGS:-}
