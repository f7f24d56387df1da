#!/usr/bin/env bash
# Make sure a headless Chromium is available for tests/integration/test_report_html.py.
#
#   scripts/ensure-chromium.sh
#
# Installs the Debian package `chromium` with apt-get when no Chromium is on PATH and this
# runs as root; otherwise prints why not. Always exits 0: without a browser the test skips.
set -u

for bin in chromium chromium-browser google-chrome; do
    if command -v "$bin" >/dev/null 2>&1; then
        echo "chromium: $(command -v "$bin")"
        exit 0
    fi
done
if [ "$(id -u)" != "0" ]; then
    echo "chromium: not found; install it as root: apt-get install -y chromium"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium: not found and no apt-get on this system"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
if apt-get install -y -qq chromium >/dev/null 2>&1; then
    echo "chromium: installed $(command -v chromium)"
else
    echo "chromium: apt-get could not install it (no network or no package); the test will skip"
fi
exit 0
