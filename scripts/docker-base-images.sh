#!/usr/bin/env bash
# Local base images for hosts that reach no container registry (idempotent: each image is built
# only when missing):
#   local/debian:bookworm        debootstrap --variant=minbase from the Debian mirror apt uses
#   local/python:3.11-bookworm   python3.11 + venv + the host's CA bundle (docker/base/python.Dockerfile)
#   local/postgres:15, local/redis:7, local/seaweedfs:4.48: stand-ins for the upstream service
#   images (docker/standins/), for the compose stack
# The Dockerfiles take these as build args (PYTHON_IMAGE=local/python:3.11-bookworm); with a
# registry, the upstream defaults (python:3.11-slim) build the same files.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_IMAGE=${DEBIAN_IMAGE:-local/debian:bookworm}
PYTHON_IMAGE=${PYTHON_IMAGE:-local/python:3.11-bookworm}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

have() { docker image inspect "$1" >/dev/null 2>&1; }

debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1 || true)
  if [ -z "$uri" ]; then
    uri=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v security | head -1 || true)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

if ! have "$DEBIAN_IMAGE"; then
  command -v debootstrap >/dev/null || { echo "debootstrap missing: run scripts/system-deps.sh" >&2; exit 1; }
  root=$(mktemp -d /var/tmp/gpujobs-debootstrap.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  mirror=$(debian_mirror)
  echo "debootstrap bookworm from $mirror (a few minutes)"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; exit 1; }
  # The image keeps the same mirror and the security suite the host uses.
  cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" 2>/dev/null || true
  [ -f "$root/etc/apt/sources.list.d/debian.sources" ] && : >"$root/etc/apt/sources.list"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import - "$DEBIAN_IMAGE" >/dev/null
  rm -rf "$root" "$root.log"
  trap - EXIT
  echo "built $DEBIAN_IMAGE"
fi

if ! have "$PYTHON_IMAGE"; then
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  cp "$CA_BUNDLE" "$ctx/ca-certificates.crt"
  cp docker/base/python.Dockerfile "$ctx/Dockerfile"
  docker build -q --network host --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" -t "$PYTHON_IMAGE" "$ctx"
  echo "built $PYTHON_IMAGE"
fi

# Stand-ins for the upstream service images (same entrypoint contracts), built on the local base.
build_standin() {  # image dockerfile
  have "$1" && return 0
  docker build -q --network host --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" \
    --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" -f "$2" -t "$1" docker/standins >/dev/null
  echo "built $1"
}
build_standin "${POSTGRES_IMAGE:-local/postgres:15}" docker/standins/postgres.Dockerfile
build_standin "${REDIS_IMAGE:-local/redis:7}" docker/standins/redis.Dockerfile
build_standin "${SEAWEEDFS_IMAGE:-local/seaweedfs:4.48}" docker/standins/seaweedfs.Dockerfile
