#!/usr/bin/env bash
# Installs, while `make test` builds, what its later steps would each install when they start: the Debian packages
# of the integration suites and their Python packages. Downloads overlap the compile instead of following it; every
# suite still checks for and installs what it needs itself, so a failure here costs only time (the log says why).
#   tools/ci/prefetch.sh start   in the background, its output in .build/ci-prefetch.log
#   tools/ci/prefetch.sh wait    until it is done (before the first suite, so two apt-gets never race for dpkg's lock)
#   tools/ci/prefetch.sh         the work itself
set -uo pipefail
cd "$(dirname "$0")/../.."
log=.build/ci-prefetch.log
pidfile=.build/ci-prefetch.pid
case "${1:-run}" in
    start)
        mkdir -p .build
        nohup "$0" run > "$log" 2>&1 &
        echo $! > "$pidfile"
        exit 0
        ;;
    wait)
        [ -f "$pidfile" ] || exit 0
        pid=$(cat "$pidfile")
        while kill -0 "$pid" 2>/dev/null; do sleep 1; done
        rm -f "$pidfile"
        tail -3 "$log"
        exit 0
        ;;
esac
# The suites' Debian packages (each suite's run.sh names its own; kept in step with them here).
packages="systemd testssl.sh etcd-server etcd-client curl iproute2 iptables prometheus chromium chromium-driver"
missing=""
for package in $packages; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing="$missing $package"
done
if [ -n "$missing" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "prefetch: installing$missing"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null \
        || echo "prefetch: apt-get failed; the suites install what they need themselves"
fi
requirements=()
for file in IntegrationTests/*/requirements.txt; do requirements+=(-r "$file"); done
python3 -m pip install --quiet --disable-pip-version-check "${requirements[@]}" "schemathesis==4.32.5" \
    || echo "prefetch: pip failed; the suites install what they need themselves"
echo "prefetch: done"
