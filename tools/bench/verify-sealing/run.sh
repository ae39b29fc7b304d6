#!/usr/bin/env bash
# ledger verify, before and after sealing: each build imports the same operations into its own ledger (the old
# build writes version 1 records, the new one sealed version 3 records), then `ledger verify` of each by its own
# binary, interleaved, 3 rounds; wall time of the process.
# The binaries are tools/bench/compare.sh's (run it first with the old ref, e.g. `compare.sh ffb0214 import 1`).
set -euo pipefail
cd "$(dirname "$0")/../../.."
old=$PWD/.build-bench-old/release/ledger
new=$PWD/.build-bench/release/ledger
dir=${DIR:-/tmp/seal65/verify}
mkdir -p "$dir"
ops=$dir/ops.jsonl
[ -s "$ops" ] || python3 tools/bench/verify-sealing/gen.py 400000 > "$ops"
for side in old new; do
    rm -rf $dir/data-$side
    bin=${!side}
    /usr/bin/time -f "import $side: %e s" $bin import $ops --data $dir/data-$side --format json --no-progress
done
for round in 1 2 3; do
    for side in old new; do
        bin=${!side}
        start=$(date +%s.%N)
        $bin verify --data $dir/data-$side > $dir/verify-$side-$round.txt || echo "exit $? ($side)"
        end=$(date +%s.%N)
        echo "round $round $side: $(echo "$end - $start" | bc) s"
    done
done
cat $dir/verify-old-1.txt $dir/verify-new-1.txt
