#!/usr/bin/env bash
# Install nginx (Debian package) when it is missing. The slow-client tests start their own
# throw-away nginx on a free loopback port with a temporary prefix (tests/hosting/nginx.py), in
# front of a `grader serve`, with the configuration docs/deploy.md prescribes (docs/nginx.conf);
# nothing is started here and no system service is enabled.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
    echo "nginx: $( (nginx -v || /usr/sbin/nginx -v) 2>&1 | head -1)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
for try in 1 2 3 4 5 6; do  # another apt (a sibling setup script) may hold the lock for a while
    if apt-get install -y --no-install-recommends nginx-light >/dev/null 2>&1 \
        || apt-get install -y --no-install-recommends nginx >/dev/null 2>&1 \
        || { apt-get update >/dev/null 2>&1 && apt-get install -y --no-install-recommends nginx >/dev/null 2>&1; }; then
        break
    fi
    sleep 10
done
[ -x /usr/sbin/nginx ] || { echo "nginx: could not install nginx" >&2; exit 1; }
# Debian's package may start a system service on port 80; the tests never use it.
echo "nginx: installed $(/usr/sbin/nginx -v 2>&1 | head -1)"
