#!/usr/bin/env bash
# Build the gpujobs images from docker/ (api, worker with the trainer, trainer CPU variant) and
# record their sizes in benchmarks/results/images.json (from `docker image inspect`).
# Docker's layer cache makes a rebuild with unchanged sources take seconds.
#   PYTHON_IMAGE=python:3.11-slim scripts/docker-images.sh     # on a host with a registry
# Defaults suit a host without one: the local base from scripts/docker-base-images.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_IMAGE=${PYTHON_IMAGE:-local/python:3.11-bookworm}
API_IMAGE=${API_IMAGE:-gpujobs-api:dev}
WORKER_IMAGE=${WORKER_IMAGE:-gpujobs-worker:dev}
TRAINER_IMAGE=${TRAINER_IMAGE:-gpujobs-trainer:cpu}
TORCH_WHEEL=${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}
SIZES=${IMAGE_SIZES_JSON:-benchmarks/results/images.json}

# The CPU torch wheel, where this machine has one, goes into the build context (never into git).
if [ -f "$TORCH_WHEEL" ] && [ ! -f "docker/wheels/$(basename "$TORCH_WHEEL")" ]; then
  cp "$TORCH_WHEEL" docker/wheels/
fi

build() {  # tag dockerfile [build args...]
  local tag=$1 file=$2
  shift 2
  local started=$SECONDS
  docker build -q --network host --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" "$@" \
    -f "$file" -t "$tag" . >/dev/null
  echo "built $tag in $((SECONDS - started)) s"
}

build "$API_IMAGE" docker/api.Dockerfile
build "$WORKER_IMAGE" docker/worker.Dockerfile --build-arg INSTALL_TRAINER=1
build "$TRAINER_IMAGE" docker/trainer.Dockerfile --build-arg TORCH_VARIANT=cpu

python3 scripts/image_sizes.py "$SIZES" "$PYTHON_IMAGE" "$API_IMAGE" "$WORKER_IMAGE" "$TRAINER_IMAGE"
