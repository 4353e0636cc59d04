#!/usr/bin/env bash
# Build every Docker image of the project from scratch, offline after the host
# downloads (run as root; `make images` calls this):
#
#   1. scripts/setup-docker.sh           Docker engine + debootstrap, daemon up
#   2. images/base/build.sh              grader-base:bookworm (debootstrap, cached rootfs)
#   3. images/wheelhouse.sh              wheels for the images, downloaded on the host
#   4. images/runner/build.sh            grader-runner:dev
#   5. submissions_example/docker-bm25/build.sh   grader-example-bm25:1
#   6. tests/sandbox_images/build.sh     grader-test-<name>:1
#
# Each step is idempotent; the timings and image sizes are printed at the end.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

timings=()
step() {
    local name=$1
    shift
    local start=$SECONDS
    echo "==> $name"
    "$@"
    timings+=("$(printf '%-22s %4d s' "$name" $((SECONDS - start)))")
}

step setup-docker bash scripts/setup-docker.sh
step base bash images/base/build.sh
step wheelhouse bash images/wheelhouse.sh
step runner bash images/runner/build.sh
step example-bm25 bash submissions_example/docker-bm25/build.sh
step test-images bash tests/sandbox_images/build.sh

echo "==> done"
printf '%s\n' "${timings[@]}"
docker image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' \
    | grep -E '^grader-(base|runner|example|test)' | sort
