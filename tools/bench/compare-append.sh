#!/usr/bin/env bash
# Durable append before and after a change, in one run: builds the benchmark harness of OLD_REF (a commit)
# beside this checkout's, then runs their append workload alternately (old, new, old, new, …) so that the
# disk's drift hits both alike, and prints each round and the medians.
#   tools/bench/compare-append.sh OLD_REF [ROUNDS]      (default 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/../.."
old_ref="${1:?usage: tools/bench/compare-append.sh OLD_REF [ROUNDS]}"
rounds="${2:-3}"
tools/install-deps.sh
export TOPICLEDGER_BENCH=1
old_src=.build-bench-old-src
rm -rf "$old_src"
git worktree prune
git worktree add --detach "$old_src" "$old_ref" >/dev/null
trap 'git worktree remove --force "$old_src" >/dev/null 2>&1 || true' EXIT
(cd "$old_src" && swift build -c release --scratch-path ../.build-bench-old --product LedgerBench)
swift build -c release --scratch-path .build-bench --product LedgerBench
out=$(mktemp -d)
for round in $(seq 1 "$rounds"); do
    .build-bench-old/release/LedgerBench --mode quick --only append --json "$out/old-$round.json" >/dev/null
    .build-bench/release/LedgerBench --mode quick --only append --json "$out/new-$round.json" >/dev/null
done
python3 - "$out" "$rounds" "$old_ref" <<'PY'
import json, statistics, sys
out, rounds, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rates(side):
    table = {}
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{out}/{side}-{r}.json"))["results"]:
            if row["name"].startswith("append,"):
                table.setdefault(row["name"], []).append(row["value"])
    return table
old, new = rates("old"), rates("new")
print(f"durable append, events/s: {ref} (before) against this checkout (after), {rounds} interleaved rounds")
for name in old:
    o, n = statistics.median(old[name]), statistics.median(new[name])
    print(f"  {name:20} before {o:9.0f}  after {n:9.0f}  after/before {n / o:5.2f}"
          f"   rounds: before {[round(v) for v in old[name]]} after {[round(v) for v in new[name]]}")
PY
