#!/usr/bin/env bash
# Debian packages the tests use, installed only when missing.
set -euo pipefail

missing=()
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v chromium >/dev/null || missing+=(chromium)
command -v pg_isready >/dev/null || missing+=(postgresql-client)
command -v redis-cli >/dev/null || missing+=(redis-tools)

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
