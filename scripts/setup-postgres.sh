#!/usr/bin/env bash
# Make PostgreSQL's server binaries available for the hosting tests (Debian's `postgresql` package).
# The tests start their own throw-away cluster (initdb + pg_ctl as the `postgres` user, bound to
# 127.0.0.1 on a free port, in a temporary folder); nothing else is configured here.
#   scripts/setup-postgres.sh        # as root: apt-get install postgresql when initdb is missing
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    echo "postgres: $(ls -d /usr/lib/postgresql/*/bin | tail -1) present"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "postgres: initdb missing; run as root to install Debian's postgresql package" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
# The package starts a system cluster; the tests do not use it.
command -v pg_ctlcluster >/dev/null && pg_ctlcluster --force "$(ls /usr/lib/postgresql | tail -1)" main stop 2>/dev/null || true
echo "postgres: installed $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
