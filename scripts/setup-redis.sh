#!/usr/bin/env bash
# Install redis-server (Debian package) when it is missing. The tests start their own
# throw-away redis-server on a free loopback port with a temporary folder (tests/hosting/redis.py);
# nothing is started here and no system service is enabled.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    echo "redis: $(redis-server --version | head -1)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
for try in 1 2 3 4 5 6; do  # another apt (a sibling setup script) may hold the lock for a while
    if apt-get install -y --no-install-recommends redis-server >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends redis-server >/dev/null 2>&1; }; then
        break
    fi
    sleep 10
done
command -v redis-server >/dev/null 2>&1 || { echo "redis: could not install redis-server" >&2; exit 1; }
# Debian's package starts a system service on 6379; the tests never use it.
echo "redis: installed $(redis-server --version | head -1)"
