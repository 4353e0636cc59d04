#!/usr/bin/env bash
# Make a headless Chromium and its WebDriver available for the leaderboard's browser tests
# (Debian's `chromium` and `chromium-driver`, driven through Selenium from the test extra).
#   scripts/setup-chromium.sh        # as root: apt-get install both when either is missing
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    echo "chromium: $(chromium --version 2>/dev/null | head -1) and chromedriver present"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "chromium: chromium or chromedriver missing; run as root to install Debian's chromium and chromium-driver" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
echo "chromium: installed $(chromium --version 2>/dev/null | head -1)"
