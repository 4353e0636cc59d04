#!/usr/bin/env bash
# Build the deliberately misbehaving test images: grader-test-<name>:1.
#
#   tests/sandbox_images/build.sh                 # all of them
#   tests/sandbox_images/build.sh egress memhog   # some
#   tests/sandbox_images/build.sh --list          # names only
#
# Each is grader-base:bookworm plus one stdlib script (NAME/entry.py) and the
# shared _common/harness.py: a COPY on the base, built with --network none.
set -euo pipefail
BASE_IMAGE="${GRADER_BASE_IMAGE:-grader-base:bookworm}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
all=()
for dockerfile in "$HERE"/*/Dockerfile; do
    all+=("$(basename "$(dirname "$dockerfile")")")
done
if [[ ${1:-} == --list ]]; then printf '%s\n' "${all[@]}"; exit 0; fi
names=("$@")
((${#names[@]})) || names=("${all[@]}")

docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
    || { echo "test images: $BASE_IMAGE is missing (run images/build-all.sh, which builds grader-base:bookworm offline when no registry answers)" >&2; exit 1; }

# The tiny images (FROM scratch) need a static busybox: the host's (Debian busybox-static) or one
# unpacked from the Debian package, downloaded once into a cache (apt-get download; no install).
busybox_static() {
    local cache="${XDG_CACHE_HOME:-$HOME/.cache}/grader/busybox-static"
    if [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1; then echo /bin/busybox; return; fi
    if [[ ! -x $cache/bin/busybox ]]; then
        local deb; deb="$(mktemp -d "${TMPDIR:-/tmp}/grader-busybox.XXXXXX")"
        (cd "$deb" && chmod 777 . && apt-get download busybox-static >/dev/null 2>&1) \
            || { echo "test images: cannot get busybox-static (apt-get download busybox-static)" >&2; rm -rf "$deb"; return 1; }
        mkdir -p "$cache" && dpkg-deb -x "$deb"/busybox-static_*.deb "$cache" && rm -rf "$deb"
    fi
    echo "$cache/bin/busybox"
}

ctx="$(mktemp -d "${TMPDIR:-/tmp}/grader-test-ctx.XXXXXX")"
err="$(mktemp "${TMPDIR:-/tmp}/grader-test-build.XXXXXX")"
trap 'rm -rf "$ctx" "$err"' EXIT
start=$SECONDS
for name in "${names[@]}"; do
    [[ -f $HERE/$name/Dockerfile ]] \
        || { echo "test images: no such image '$name' (known: ${all[*]})" >&2; exit 1; }
    rm -rf "${ctx:?}"/*
    if grep -q '^FROM scratch' "$HERE/$name/Dockerfile"; then
        cp "$HERE/$name/Dockerfile" "$HERE/$name/entry.sh" "$ctx/" && cp "$(busybox_static)" "$ctx/busybox"
    else
        cp "$HERE/$name/Dockerfile" "$HERE/$name/entry.py" "$HERE/_common/harness.py" "$ctx/"
    fi
    t=$SECONDS
    DOCKER_BUILDKIT=0 docker build --network none --build-arg "BASE_IMAGE=$BASE_IMAGE" --quiet --tag "grader-test-$name:1" "$ctx" >/dev/null 2>"$err" \
        || { cat "$err" >&2; echo "test images: building grader-test-$name:1 failed" >&2; exit 1; }
    echo "test images: built grader-test-$name:1 in $((SECONDS - t)) s"
done
echo "test images: ${#names[@]} built in $((SECONDS - start)) s"
