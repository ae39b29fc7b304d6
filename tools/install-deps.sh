#!/usr/bin/env bash
# Installs the system packages TopicLedger needs (liblmdb-dev, pkg-config) when they are missing.
# Runs apt-get when root; otherwise says exactly what to install.
set -euo pipefail
if pkg-config --exists lmdb 2>/dev/null; then exit 0; fi
packages="liblmdb-dev pkg-config"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing $packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $packages >/dev/null
    pkg-config --exists lmdb && exit 0
fi
echo "error: LMDB is missing. Install it with: sudo apt-get install -y $packages" >&2
exit 1
