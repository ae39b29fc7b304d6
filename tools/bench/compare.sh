#!/usr/bin/env bash
# One workload before and after a change, in one run: builds the benchmark harness of OLD_REF (a commit)
# beside this checkout's, then runs the workload alternately (old, new, old, new, …) so that the machine's
# drift hits both alike, and prints each round and the medians of every row.
#   tools/bench/compare.sh OLD_REF [WORKLOAD] [ROUNDS]     (default: append, 3 rounds)
#   tools/bench/compare.sh b992114^ append 5               durable append without and with the Merkle tree
#   tools/bench/compare.sh b992114^ rebuild                rebuild without and with it
set -euo pipefail
cd "$(dirname "$0")/../.."
old_ref="${1:?usage: tools/bench/compare.sh OLD_REF [WORKLOAD] [ROUNDS]}"
workload="${2:-append}"
rounds="${3:-3}"
tools/install-deps.sh
export TOPICLEDGER_BENCH=1
old_src=.build-bench-old-src
rm -rf "$old_src"
git worktree prune
git worktree add --detach "$old_src" "$old_ref" >/dev/null
trap 'git worktree remove --force "$old_src" >/dev/null 2>&1 || true' EXIT
# Each side's `ledger` beside its harness: the import and replay workloads run it as a child process.
(cd "$old_src" && swift build -c release --scratch-path ../.build-bench-old --product LedgerBench &&
    swift build -c release --scratch-path ../.build-bench-old --product ledger)
swift build -c release --scratch-path .build-bench --product LedgerBench
swift build -c release --scratch-path .build-bench --product ledger
out=$(mktemp -d)
for round in $(seq 1 "$rounds"); do
    .build-bench-old/release/LedgerBench --mode quick --only "$workload" --json "$out/old-$round.json" >/dev/null
    .build-bench/release/LedgerBench --mode quick --only "$workload" --json "$out/new-$round.json" >/dev/null
done
python3 - "$out" "$rounds" "$old_ref" "$workload" <<'PY'
import json, re, statistics, sys
out, rounds, ref, workload = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rates(side):
    table = {}
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{out}/{side}-{r}.json"))["results"]:
            # Rows named by their ledger's size ("rebuild (247620 events)") are one row across rounds.
            name = re.sub(r" \(\d+ events\)", "", row["name"])
            table.setdefault(name, ([], row["unit"]))[0].append(row["value"])
    return table
old, new = rates("old"), rates("new")
print(f"{workload}: {ref} (before) against this checkout (after), {rounds} interleaved rounds")
for name in old:
    if name not in new:
        continue
    (o, unit), n = old[name], new[name][0]
    mo, mn = statistics.median(o), statistics.median(n)
    # Each round runs before and after back to back: the median of the rounds' own ratios is the figure
    # least moved by the machine's drift; the ratio of the medians is printed beside it.
    paired = statistics.median(b / a for a, b in zip(o, n))
    print(f"  {name:28} {unit}: before {mo:10.1f}  after {mn:10.1f}  after/before: paired {paired:5.2f},"
          f" of medians {mn / mo:5.2f}"
          f"   rounds: before {[round(v, 1) for v in o]} after {[round(v, 1) for v in n]}")
PY
