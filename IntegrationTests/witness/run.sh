#!/usr/bin/env bash
# Witnesses (C2SP tlog-witness, tlog-cosignature): `ledger witness` against a log this script plays (written from
# the C2SP text alone), and `ledger serve` collecting cosignatures from two `ledger witness` processes.
#   IntegrationTests/witness/run.sh [LEDGER_BINARY [PYTEST_ARGUMENTS…]]
set -euo pipefail
cd "$(dirname "$0")"
binary="${1:-$(cd ../.. && swift build --show-bin-path)/ledger}"
shift $(( $# > 0 ? 1 : 0 ))
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
LEDGER_BIN="$binary" python3 -m pytest -q -p no:cacheprovider test_witness.py test_witness_limits.py "$@"
