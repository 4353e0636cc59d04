#!/usr/bin/env bash
# Make a Docker engine available on this machine (idempotent; run as root).
#
#   1. install Debian's docker.io and debootstrap when docker/dockerd/debootstrap
#      are missing;
#   2. start dockerd in the background when the daemon does not answer, and wait
#      (up to ${DOCKER_WAIT:-60} s) for /var/run/docker.sock and `docker info`
#      (dockerd's log: ${DOCKERD_LOG:-/tmp/dockerd.log}).
#
# Prints each thing it did; exits non-zero with a one-line reason otherwise.
set -euo pipefail

WAIT="${DOCKER_WAIT:-60}"
LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"
PIDFILE="${DOCKERD_PIDFILE:-/var/run/docker.pid}"
# The daemon's socket: DOCKER_HOST's when it names a unix socket (the docker CLI
# follows it too), else the default one. DOCKERD_ARGS adds flags to a dockerd
# this script starts (tests use it to run a second, throwaway daemon).
SOCK=/var/run/docker.sock
if [[ ${DOCKER_HOST:-} == unix://* ]]; then SOCK="${DOCKER_HOST#unix://}"; fi

say() { echo "setup-docker: $*"; }
die() { echo "setup-docker: error: $*" >&2; exit 1; }

missing=()
for tool in docker dockerd debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
    [[ $EUID -eq 0 ]] || die "missing ${missing[*]} and not root: cannot apt-get install docker.io debootstrap"
    say "missing ${missing[*]}: installing docker.io and debootstrap with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # docker.io's useful recommends are named; git and needrestart are not wanted.
    apt-get install -y -qq --no-install-recommends docker.io debootstrap \
        apparmor cgroupfs-mount ca-certificates iptables xz-utils >/tmp/setup-docker-apt.log 2>&1 \
        || { tail -n 20 /tmp/setup-docker-apt.log >&2; die "apt-get install docker.io debootstrap failed"; }
    for tool in docker dockerd debootstrap; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool still missing after apt-get install"
    done
    say "installed $(docker --version 2>/dev/null || echo docker.io)"
else
    say "docker, dockerd and debootstrap already installed"
fi

if docker info >/dev/null 2>&1; then
    say "daemon already running (server $(docker info -f '{{.ServerVersion}}' 2>/dev/null))"
    exit 0
fi

[[ $EUID -eq 0 ]] || die "the Docker daemon does not answer and only root can start it"
pid=""
if [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    pid="$(cat "$PIDFILE")"
    say "dockerd (pid $pid) is running but not answering yet; waiting"
else
    # Debian's package starts it under systemd where there is one; on a machine
    # without systemd (containers, CI) start it by hand. A stale socket or pid
    # file from an earlier daemon would make the new one refuse to start.
    if [[ -z ${DOCKERD_ARGS:-} ]] && command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
        say "starting docker with systemctl"
        systemctl start docker || say "systemctl start docker failed; starting dockerd by hand"
        [[ -f $PIDFILE ]] && pid="$(cat "$PIDFILE")"
    fi
    if [[ -z $pid ]] || ! kill -0 "$pid" 2>/dev/null; then
        # Without systemd nobody may have mounted the cgroup hierarchies.
        if ! grep -q ' /sys/fs/cgroup' /proc/mounts && command -v cgroupfs-mount >/dev/null 2>&1; then
            say "mounting cgroups (cgroupfs-mount)"
            cgroupfs-mount || say "cgroupfs-mount failed; dockerd may not start"
        fi
        rm -f "$PIDFILE"
        [[ -S $SOCK ]] && rm -f "$SOCK"
        say "starting dockerd in the background (log: $LOG)"
        # shellcheck disable=SC2086
        nohup dockerd --pidfile "$PIDFILE" -H "unix://$SOCK" ${DOCKERD_ARGS:-} >"$LOG" 2>&1 </dev/null &
        pid=$!
        disown || true
    fi
fi

for ((i = 0; i < WAIT; i++)); do
    if [[ -S $SOCK ]] && docker info >/dev/null 2>&1; then
        say "daemon ready after ${i} s (server $(docker info -f '{{.ServerVersion}}' 2>/dev/null))"
        exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        tail -n 20 "$LOG" >&2 2>/dev/null || true
        die "dockerd exited during startup (see $LOG)"
    fi
    sleep 1
done
tail -n 20 "$LOG" >&2 2>/dev/null || true
die "dockerd did not answer within ${WAIT} s (see $LOG)"
