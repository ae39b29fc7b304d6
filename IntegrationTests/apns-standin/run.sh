#!/usr/bin/env bash
# The APNs stand-in's own tests (it must answer as Apple documents before anything is tested against it), then
# the APNs provider through `ledger serve` against it (test_ledger_apns.py), FCM's Live Activity messages
# (test_ledger_live_activity.py), topics that update their followers' Live Activities
# (test_ledger_live_activity_topics.py) and topics carried by broadcast channels (test_ledger_broadcast.py).
#   IntegrationTests/apns-standin/run.sh [LEDGER_BINARY [PYTEST_ARGUMENTS…]]
set -euo pipefail
cd "$(dirname "$0")"
binary="${1:-$(cd ../.. && swift build --show-bin-path)/ledger}"
shift $(( $# > 0 ? 1 : 0 ))
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
LEDGER_BIN="$binary" python3 -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning test_standin.py \
    test_ledger_apns.py test_ledger_live_activity.py test_ledger_live_activity_topics.py test_ledger_broadcast.py \
    "$@"
