#!/usr/bin/env bash
# The alert rules (samples/prometheus): promtool checks them and runs their unit tests, then a running `ledger serve`
# (alone, and a cluster of one on etcd) is scraped for every metric and label they use, so a renamed metric fails.
#   IntegrationTests/alerts/run.sh [LEDGER_BINARY [PYTEST_ARGUMENTS…]]
set -euo pipefail
cd "$(dirname "$0")"
binary="${1:-$(cd ../.. && swift build --show-bin-path)/ledger}"
shift $(( $# > 0 ? 1 : 0 ))
# promtool is in Debian's `prometheus` package; the cluster's series need etcd (etcd-server).
missing=""
command -v promtool >/dev/null || missing="$missing prometheus"
command -v etcd >/dev/null || missing="$missing etcd-server"
if [ -n "$missing" ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "installing$missing" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
        echo "error: the alert tests need promtool and etcd. Install them with: sudo apt-get install -y$missing" >&2
        exit 1
    fi
fi
samples=../../samples/prometheus
promtool check rules "$samples/alerts.yml"
promtool test rules "$samples/alerts.test.yml"
# --syntax-only: the sample's auditor key file exists on a Prometheus host, not here.
promtool check config --syntax-only "$samples/prometheus.yml"
python3 -m pip install --quiet --disable-pip-version-check -r requirements.txt
# An empty parameter set (a rules file without rules) fails collection rather than skipping; pytest exits 5 when no
# test ran.
LEDGER_BIN="$binary" python3 -m pytest -q -p no:cacheprovider -o empty_parameter_set_mark=fail_at_collect \
    test_alert_metrics.py "$@"
