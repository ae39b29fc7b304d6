#!/usr/bin/env bash
# Runs one step of `make test` and says how long it took: `tools/ci/step.sh NAME COMMAND [ARGS...]`.
# Each step's time is kept in .build/ci-steps.txt (started afresh by the step named "deps"), and the whole
# table is printed after every step and when one fails, so the tail of a CI log always shows where the time went.
set -uo pipefail
name="$1"; shift
table=.build/ci-steps.txt
mkdir -p .build
if [ "$name" = deps ] || [ ! -f "$table" ]; then : > "$table"; fi
start=$(date +%s)
"$@"
status=$?
seconds=$(( $(date +%s) - start ))
outcome=ok; [ "$status" -eq 0 ] || outcome="FAILED (exit $status)"
printf '%-22s %5d s  %s\n' "$name" "$seconds" "$outcome" >> "$table"
total=$(awk '{ s += $2 } END { print s }' "$table")
echo "== make test: steps so far (total ${total} s)"
cat "$table"
exit "$status"
