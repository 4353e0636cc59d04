#!/usr/bin/env bash
# Build grader-base:bookworm without a container registry: debootstrap a
# Debian bookworm minbase with Python 3.11 on the host, add the non-root user
# the sandbox runs as (uid 10001, `runner`, home /tmp), and `docker import` it.
#
#   images/base/build.sh            # no-op when the image exists, built by this recipe
#   FORCE=1 images/base/build.sh    # re-import the image (reuses the cached rootfs)
#
# The rootfs tarball is cached under ${GRADER_IMAGE_CACHE:-~/.cache/grader/images},
# keyed by what goes into it, so a rebuild after `docker rmi` skips debootstrap.
# Needs root, debootstrap and a running Docker daemon (scripts/setup-docker.sh).
set -euo pipefail

IMAGE="${GRADER_BASE_IMAGE:-grader-base:bookworm}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-pip,python3-venv,ca-certificates"
RUNNER_UID=10001
CACHE="${GRADER_IMAGE_CACHE:-$HOME/.cache/grader/images}"

log() { echo "base: $*"; }

# Bump RECIPE when the steps below change what ends up in the rootfs.
RECIPE=2
key="$(printf '%s\n' "$RECIPE" "$SUITE" "$MIRROR" "$PACKAGES" "$RUNNER_UID" | sha256sum | cut -c1-16)"

# The image carries its recipe key as a label: present with the same key = done.
if [[ -z "${FORCE:-}" ]] \
        && [[ "$(docker image inspect -f '{{index .Config.Labels "grader.base.recipe"}}' "$IMAGE" 2>/dev/null)" == "$key" ]]; then
    log "$IMAGE already present ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
    exit 0
fi

[[ $EUID -eq 0 ]] || { echo "base: debootstrap needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "base: debootstrap is missing (run scripts/setup-docker.sh)" >&2; exit 1; }

tarball="$CACHE/rootfs-$SUITE-$key.tar"
mkdir -p "$CACHE"

if [[ -f "$tarball" ]]; then
    log "reusing cached rootfs $tarball"
else
    work="$(mktemp -d "${TMPDIR:-/tmp}/grader-rootfs.XXXXXX")"
    cleanup() {
        # debootstrap mounts proc/sys inside the target; never follow them.
        for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
        rm -rf --one-file-system "$work"
    }
    trap cleanup EXIT
    start=$SECONDS
    log "debootstrap $SUITE ($PACKAGES) into $work/rootfs (log: $work/debootstrap.log)"
    if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/rootfs" "$MIRROR" \
            >"$work/debootstrap.log" 2>&1; then
        tail -n 30 "$work/debootstrap.log" >&2
        cp "$work/debootstrap.log" "$CACHE/debootstrap-failed.log" 2>/dev/null || true
        echo "base: debootstrap failed (log kept at $CACHE/debootstrap-failed.log)" >&2
        exit 1
    fi
    log "debootstrap took $((SECONDS - start)) s"

    root="$work/rootfs"
    chroot "$root" groupadd --gid "$RUNNER_UID" runner
    chroot "$root" useradd --uid "$RUNNER_UID" --gid "$RUNNER_UID" --home-dir /tmp \
        --no-create-home --shell /usr/sbin/nologin runner
    # Slim down: package caches, lists, docs, man pages, host leftovers.
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
        "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old \
        "$root"/var/log/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
        "$root"/usr/share/info/* "$root"/tmp/* "$root"/root/.cache
    find "$root"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +
    # Keep the stdlib's byte-code (py3compile made it): read-only containers
    # cannot write it, and compiling at every start costs seconds.
    chroot "$root" python3 -m compileall -q -j 0 /usr/lib/python3.11 >/dev/null 2>&1 || true
    : >"$root"/etc/resolv.conf
    echo grader >"$root"/etc/hostname
    rm -f "$root"/etc/machine-id && : >"$root"/etc/machine-id

    # Docker supplies /dev, /proc and /sys at run time: leave them empty.
    tar -C "$root" --numeric-owner --sort=name --xattrs \
        --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
        -cf "$tarball.part" .
    mv "$tarball.part" "$tarball"
    find "$CACHE" -maxdepth 1 -name "rootfs-$SUITE-*.tar" ! -name "${tarball##*/}" -delete  # older recipes
    log "cached rootfs $tarball ($(du -h "$tarball" | cut -f1))"
fi

start=$SECONDS
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
    --change 'ENV PYTHONUNBUFFERED=1' \
    --change 'ENV HOME=/tmp' \
    --change 'WORKDIR /' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL grader.base.recipe=$key" \
    --message "grader base: debian $SUITE minbase + $PACKAGES, user runner ($RUNNER_UID)" \
    "$tarball" "$IMAGE" >/dev/null
log "imported $IMAGE in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
