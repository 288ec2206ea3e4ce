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
# The wheel's folder: TORCH_WHEEL_DIR (the Makefile sets it), else shared/wheels beside the clone,
# else /opt/wheels (older machines).
wheel_name=torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
wheel_dir=${TORCH_WHEEL_DIR:-}
if [ -z "$wheel_dir" ]; then
  for dir in ../shared/wheels /opt/wheels; do
    if [ -f "$dir/$wheel_name" ]; then wheel_dir=$(cd "$dir" && pwd); break; fi
  done
fi
TORCH_WHEEL=${TORCH_WHEEL:-${wheel_dir:-/opt/wheels}/$wheel_name}
SIZES=${IMAGE_SIZES_JSON:-benchmarks/results/images.json}

# The CPU torch wheel, where this machine has one, is served to the builds on loopback (they use
# the host network): no copy in the build context or in any layer. A fixed port keeps the build
# argument, and so Docker's layer cache, the same from one build to the next.
torch_args=()
if [ -f "$TORCH_WHEEL" ]; then
  port=${TORCH_WHEEL_PORT:-38471}
  python3 -m http.server --bind 127.0.0.1 --directory "$(dirname "$TORCH_WHEEL")" "$port" \
    >/dev/null 2>&1 &
  server=$!
  trap 'kill "$server" 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/', timeout=1)" \
      2>/dev/null && break
    sleep 0.1
  done
  torch_args=(--build-arg "TORCH_FIND_LINKS=http://127.0.0.1:$port/")
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
build "$WORKER_IMAGE" docker/worker.Dockerfile --build-arg INSTALL_TRAINER=1 "${torch_args[@]}"
build "$TRAINER_IMAGE" docker/trainer.Dockerfile --build-arg TORCH_VARIANT=cpu "${torch_args[@]}"

python3 scripts/image_sizes.py "$SIZES" "$PYTHON_IMAGE" "$API_IMAGE" "$WORKER_IMAGE" "$TRAINER_IMAGE"
