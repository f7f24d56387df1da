#!/usr/bin/env bash
# Make sure a headless Chromium is there for tests/integration/test_report_html.py, the test
# that opens the HTML report in a real browser. `make test` runs this once, as its `browser`
# step (`make browser`); no test installs anything.
#
#   scripts/ensure-chromium.sh
#
# Uses $CHROMIUM, or chromium / chromium-browser / google-chrome on PATH, when one is there.
# Otherwise installs the Debian package `chromium` (about 100 MB with its libraries, from the
# system's apt sources, without recommended packages) with apt-get, when this runs as root;
# else it prints the command to run. Always exits 0: without a browser that one test skips
# and says why.
set -u

if [ -n "${CHROMIUM:-}" ] && [ -x "${CHROMIUM}" ]; then
    echo "chromium: ${CHROMIUM} (from \$CHROMIUM)"
    exit 0
fi
for bin in chromium chromium-browser google-chrome; do
    if command -v "$bin" >/dev/null 2>&1; then
        echo "chromium: $(command -v "$bin")"
        exit 0
    fi
done
if [ "$(id -u)" != "0" ]; then
    echo "chromium: not found; install it as root (apt-get install --no-install-recommends" \
         "chromium), or set CHROMIUM=/path/to/chrome; until then the browser test skips"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium: not found and no apt-get here; install Chromium or Chrome, or set" \
         "CHROMIUM=/path/to/chrome; until then the browser test skips"
    exit 0
fi
echo "chromium: installing the Debian package 'chromium' with apt-get (no recommended packages)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null 2>&1 || true
if apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; then
    echo "chromium: installed $(command -v chromium)"
else
    echo "chromium: apt-get could not install it (no network or no package); the browser test" \
         "will skip"
fi
exit 0
