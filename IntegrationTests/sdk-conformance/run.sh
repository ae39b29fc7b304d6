#!/usr/bin/env bash
# SDK conformance: drives the built `ledger serve` with the official firebase-admin 7.7.0 SDK, then
# checks that `ledger verify` passes on the server's data; then the SDK and delivery suites over HTTPS.
#   IntegrationTests/sdk-conformance/run.sh [LEDGER_BINARY]
set -euo pipefail
cd "$(dirname "$0")"
binary="${1:-$(cd ../.. && swift build --show-bin-path)/ledger}"
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
# testssl.sh checks the HTTPS server's protocols and suites (test_https.py).
if ! command -v testssl >/dev/null; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing testssl.sh" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq testssl.sh >/dev/null
    else
        echo "error: the HTTPS tests need testssl.sh. Install it with: sudo apt-get install -y testssl.sh" >&2
        exit 1
    fi
fi
shift $(( $# > 0 ? 1 : 0 ))
LEDGER_BIN="$binary" python3 -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning . "$@"
# Without arguments, the SDK and delivery suites once more over HTTPS with a test CA (the server fixture serves
# TLS when LEDGER_TLS=1; test_https.py holds the rest of HTTPS). The contract's coverage is the first pass's.
if [ $# -eq 0 ]; then
    LEDGER_TLS=1 LEDGER_CONTRACT_COVERAGE=0 LEDGER_BIN="$binary" \
        python3 -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning test_admin_sdk.py test_delivery.py
fi
