#!/usr/bin/env bash
# Fuzzes with libFuzzer (AddressSanitizer on) for a bounded time per target:
#   ConditionFuzzer  the condition parser (round trip, set algebra against brute force)
#   MessageFuzzer    request bodies: strict JSON checks, v1 message validation, TTL and date parsers
#   EventFuzzer      the stored-event decoder (canonical fast path against SwiftProtobuf, log rendering)
#   tools/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET…]     default 60 s each, all three; FUZZ_FLAGS for libFuzzer
#   FUZZ_CONFIG=debug builds unoptimized (a faster build, slower execution). The checks are FuzzHarness's; make test runs
#   them on the seed corpora and mutations without libFuzzer (FuzzHarnessTests)
# Findings (crashing inputs) are written to tools/fuzz/findings/. Exit status 0 means no crash.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools/install-deps.sh
seconds="${1:-60}"
shift $(( $# > 0 ? 1 : 0 ))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(ConditionFuzzer MessageFuzzer EventFuzzer)
export TOPICLEDGER_FUZZ=1
config="${FUZZ_CONFIG:-release}"
flags=(-c "$config" --scratch-path .build-fuzz -Xswiftc -sanitize=fuzzer,address -Xswiftc -use-ld=lld
    -Xlinker --allow-multiple-definition)
for target in "${targets[@]}"; do swift build "${flags[@]}" --product "$target"; done
mkdir -p tools/fuzz/findings
for target in "${targets[@]}"; do
    corpus=".build-fuzz/corpus-$target"
    mkdir -p "$corpus"
    case "$target" in
        ConditionFuzzer) cp tools/fuzz/corpus/* "$corpus/"; max_len=512 ;;
        MessageFuzzer) cp tools/fuzz/corpus-message/* "$corpus/"; max_len=4096 ;;
        EventFuzzer) ".build-fuzz/$config/$target" --write-seeds "$corpus"; max_len=4096 ;;
    esac
    echo "fuzzing $target for $seconds s"
    started=$(date +%s)
    status=0
    ".build-fuzz/$config/$target" "$corpus" -max_total_time="$seconds" -max_len="$max_len" \
        -artifact_prefix="tools/fuzz/findings/$target-" -print_final_stats=1 ${FUZZ_FLAGS:-} \
        > ".build-fuzz/$target.log" 2>&1 || status=$?
    grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|Fatal error)" \
        ".build-fuzz/$target.log" || true
    echo "$target: $(( $(date +%s) - started )) s, exit $status"
    if [ "$status" -ne 0 ]; then tail -40 ".build-fuzz/$target.log"; exit "$status"; fi
    # A target whose main never starts libFuzzer exits 0 having run nothing: that is a failure too.
    units=$(sed -n 's/^stat::number_of_executed_units: *//p' ".build-fuzz/$target.log")
    if [ -z "$units" ] || [ "$units" -eq 0 ]; then
        echo "$target ran no inputs (does its main call runFuzzer?)"
        exit 1
    fi
done
