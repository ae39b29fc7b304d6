#!/usr/bin/env bash
# The audit console in a real browser: Debian's headless chromium and chromium-driver, driven by selenium,
# against the built `ledger serve` loaded with a scenario. Screenshots go to IntegrationTests/console-browser/screenshots/
# (ignored), or to $CONSOLE_SCREENSHOTS (`make screenshots` sets it to docs/console).
#   IntegrationTests/console-browser/run.sh [LEDGER_BINARY [PYTEST_ARGUMENTS…]]
set -euo pipefail
cd "$(dirname "$0")"
binary="${1:-$(cd ../.. && swift build --show-bin-path)/ledger}"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing chromium chromium-driver" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        echo "error: the browser tests need chromium. Install it with: sudo apt-get install -y chromium chromium-driver" >&2
        exit 1
    fi
fi
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
shift $(( $# > 0 ? 1 : 0 ))
LEDGER_BIN="$binary" python3 -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning . "$@"
