#!/usr/bin/env bash
# Download, on the host, every wheel the Docker images install, for the
# containers' platform (Debian bookworm: CPython 3.11, glibc 2.36, x86_64).
# Nothing is ever downloaded inside `docker build`: the images install from
# this folder with `pip install --no-index --find-links`.
#
#   images/wheelhouse.sh            # -> ${GRADER_WHEELHOUSE:-~/.cache/grader/wheelhouse}
#
# Idempotent: a stamp file records the digest of the requirement files it was
# made from; when it matches, nothing is fetched.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
WHEELHOUSE="${GRADER_WHEELHOUSE:-$HOME/.cache/grader/wheelhouse}"
PYTHON="${PYTHON:-python3}"

REQS=(
    "$HERE/runner/requirements.txt"
    "$HERE/runner/build-requirements.txt"
    "$ROOT/submissions_example/docker-bm25/requirements.txt"
)

mkdir -p "$WHEELHOUSE"
want="$(cat "${REQS[@]}" | sha256sum | cut -d' ' -f1)"
stamp="$WHEELHOUSE/.complete"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "wheelhouse: up to date at $WHEELHOUSE ($(ls "$WHEELHOUSE" | wc -l) wheels)"
    exit 0
fi

# The container's tags: cp311 on manylinux (glibc <= 2.36) x86_64. pip does not
# widen --platform to older glibc versions by itself, so every level is listed.
PLATFORMS=()
for v in 2_5 2_12 2_17 2_24 2_26 2_27 2_28 2_31 2_34 2_35 2_36; do
    PLATFORMS+=(--platform "manylinux_${v}_x86_64")
done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)

echo "wheelhouse: downloading into $WHEELHOUSE"
start=$SECONDS
for req in "${REQS[@]}"; do
    "$PYTHON" -m pip download --quiet --disable-pip-version-check \
        --dest "$WHEELHOUSE" \
        --only-binary=:all: \
        --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
        "${PLATFORMS[@]}" \
        -r "$req"
done
echo "$want" > "$stamp"
echo "wheelhouse: $(ls "$WHEELHOUSE" | wc -l) wheels, $(du -sh "$WHEELHOUSE" | cut -f1), in $((SECONDS - start)) s"
