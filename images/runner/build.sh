#!/usr/bin/env bash
# Build grader-runner:dev (images/runner/Dockerfile) offline.
#
#   images/runner/build.sh [TAG]      # default tag: ${GRADER_RUNNER_IMAGE:-grader-runner:dev}
#
# Assembles the build context in a temp dir: the Dockerfile, the requirement
# files, the wheelhouse (images/wheelhouse.sh) and the grader's source
# (grader/ without benchmark data, pyproject.toml, README.md). Always rebuilds
# (the grader's source changes often); Docker's layer cache keeps it quick.
set -euo pipefail
BASE_IMAGE="${GRADER_BASE_IMAGE:-grader-base:bookworm}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
TAG="${1:-${GRADER_RUNNER_IMAGE:-grader-runner:dev}}"
WHEELHOUSE="${GRADER_WHEELHOUSE:-$HOME/.cache/grader/wheelhouse}"

docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 \
    || { echo "runner: $BASE_IMAGE is missing (run images/build-all.sh, which builds grader-base:bookworm offline when no registry answers)" >&2; exit 1; }
[[ -f $WHEELHOUSE/.complete ]] \
    || { echo "runner: no wheelhouse at $WHEELHOUSE (run images/wheelhouse.sh)" >&2; exit 1; }

ctx="$(mktemp -d "${TMPDIR:-/tmp}/grader-runner-ctx.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
cp "$HERE/Dockerfile" "$HERE/requirements.txt" "$HERE/build-requirements.txt" "$ctx/"
# Hard links when the wheelhouse is on the same file system: no 100 MB copy.
mkdir "$ctx/wheels"
cp -l "$WHEELHOUSE"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$WHEELHOUSE"/*.whl "$ctx/wheels/"
mkdir "$ctx/src"
cp "$ROOT/pyproject.toml" "$ROOT/README.md" "$ctx/src/"
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' -cf - grader | tar -C "$ctx/src" -xf -
# No benchmark data in the image: the task folders (with their qrels) stay out;
# benchmark.json/README.md at the benchmark level stay.
find "$ctx/src/grader/bundled" -mindepth 2 -maxdepth 2 -type d -exec rm -rf {} +
if find "$ctx/src" -name '*.tsv' -o -name '*.jsonl*' | grep -q .; then
    echo "runner: benchmark data would enter the image; refusing" >&2; exit 1
fi

start=$SECONDS
# The legacy builder: BuildKit needs the buildx plugin, which Debian's docker.io
# 20.10 CLI does not bring and newer CLIs require.
DOCKER_BUILDKIT=0 docker build --network none --build-arg "BASE_IMAGE=$BASE_IMAGE" --quiet --tag "$TAG" "$ctx" >/dev/null 2>"$ctx/build.err" \
    || { cat "$ctx/build.err" >&2; echo "runner: docker build failed" >&2; exit 1; }
echo "runner: built $TAG in $((SECONDS - start)) s ($(docker image inspect -f '{{.Size}}' "$TAG" | numfmt --to=iec))"
