#!/usr/bin/env bash
# The APNs stand-in's own tests: it must answer as Apple documents before anything is tested against it.
#   tools/apns-standin/run.sh [PYTEST_ARGUMENTS…]
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
python3 -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning test_standin.py "$@"
