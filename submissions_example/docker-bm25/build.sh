#!/usr/bin/env bash
# Build the example BM25 submission image offline.
#
#   submissions_example/docker-bm25/build.sh [TAG]    # default: grader-example-bm25:1
#
# Needs grader-base:bookworm (images/base/build.sh) and the wheelhouse
# (images/wheelhouse.sh): the build context is a temp dir with the Dockerfile,
# retrieve.py, requirements.txt and wheels/.
set -euo pipefail
BASE_IMAGE="${GRADER_BASE_IMAGE:-grader-base:bookworm}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TAG="${1:-grader-example-bm25:1}"
WHEELHOUSE="${GRADER_WHEELHOUSE:-$HOME/.cache/grader/wheelhouse}"

docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
    || { echo "bm25 example: $BASE_IMAGE is missing (run images/build-all.sh, which builds grader-base:bookworm offline when no registry answers)" >&2; exit 1; }
ls "$WHEELHOUSE"/bm25s-*.whl >/dev/null 2>&1 \
    || { echo "bm25 example: no bm25s wheel in $WHEELHOUSE (run images/wheelhouse.sh)" >&2; exit 1; }

ctx="$(mktemp -d "${TMPDIR:-/tmp}/grader-bm25-ctx.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
cp "$HERE/Dockerfile" "$HERE/retrieve.py" "$HERE/requirements.txt" "$ctx/"
mkdir "$ctx/wheels"
cp -l "$WHEELHOUSE"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$WHEELHOUSE"/*.whl "$ctx/wheels/"

start=$SECONDS
DOCKER_BUILDKIT=0 docker build --network none --build-arg "BASE_IMAGE=$BASE_IMAGE" --quiet --tag "$TAG" "$ctx" >/dev/null 2>"$ctx/build.err" \
    || { cat "$ctx/build.err" >&2; echo "bm25 example: docker build failed" >&2; exit 1; }
echo "bm25 example: built $TAG in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "$TAG" | numfmt --to=iec))"
