#!/usr/bin/env bash
# ledger verify, before and after sealing: each build imports the same operations into its own ledger (the old
# build writes version 1 records, the new one sealed version 3 records), then `ledger verify` of each by its own
# binary, interleaved, 3 rounds; wall time of the process.
set -euo pipefail
old=/work/main/.build-bench-old/release/ledger
new=/work/main/.build-bench/release/ledger
dir=${DIR:-/tmp/seal65/verify}   # holds ops.jsonl: python3 gen.py 400000 > "$dir/ops.jsonl"
ops=$dir/ops.jsonl
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
