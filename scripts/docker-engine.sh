#!/usr/bin/env bash
# Start the Docker engine if it is not answering (idempotent). No default bridge and no iptables
# rewriting: containers use the networks compose creates for them, and publish only on 127.0.0.1.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exit 0
fi
command -v dockerd >/dev/null || { echo "dockerd missing: run scripts/system-deps.sh" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "dockerd is not running and starting it needs root" >&2; exit 1; }

log=/var/log/gpujobs-dockerd.log
nohup dockerd --storage-driver=overlay2 --bridge=none --iptables=false \
  ${DOCKERD_EXTRA_ARGS:-} >"$log" 2>&1 &
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then
    break
  fi
  sleep 0.5
done
docker info >/dev/null 2>&1 || { echo "dockerd did not start; see $log" >&2; tail -20 "$log" >&2; exit 1; }

# Bridged traffic between containers of one compose network only (br-* to br-*): some hosts'
# FORWARD chain drops it. Nothing is forwarded to or from any other interface.
if command -v iptables >/dev/null && ! iptables -C FORWARD -i br-+ -o br-+ -j ACCEPT 2>/dev/null; then
  iptables -I FORWARD -i br-+ -o br-+ -j ACCEPT 2>/dev/null || true
fi
