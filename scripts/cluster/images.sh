#!/usr/bin/env bash
# Put images into the local cluster's containerd (namespace k8s.io): there is no registry, so pods
# use images imported here with imagePullPolicy IfNotPresent.
#   images.sh pause           the sandbox image, from our own pause binary
#   images.sh IMAGE...        images from this machine's Docker engine (docker save | ctr import)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
# containerd 2.x warns of cgroup v1 on every call; the warning is known, not news.
ctr_() { ctr --address "$CONTAINERD_SOCK" -n k8s.io "$@" 2> >(grep -v DEPRECATION >&2); }

present() { ctr_ images ls -q | grep -x "$1" >/dev/null; }

if [ "${1:-}" = pause ]; then
  present "$PAUSE_IMAGE" && exit 0
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  cp "$BIN_DIR/pause" "$dir/pause"
  tar -C "$dir" -c pause | docker import --change 'ENTRYPOINT ["/pause"]' - "${PAUSE_IMAGE#docker.io/}" >/dev/null
  docker save "${PAUSE_IMAGE#docker.io/}" | ctr_ images import --label io.cri-containerd.pinned=pinned - >/dev/null
  echo "imported $PAUSE_IMAGE"
  exit 0
fi

for image in "$@"; do
  # docker.io/library/NAME:TAG is how containerd names what Docker calls NAME:TAG.
  full=$image
  case $image in */*) ;; *) full=library/$image ;; esac
  case $full in docker.io/*) ;; *) full=docker.io/$full ;; esac
  want=$(docker image inspect -f '{{.Id}}' "$image")
  have=$(ctr_ images ls "name==$full" 2>/dev/null | awk 'NR==2 {print $3}')
  # Docker's image id is the config digest; containerd lists the manifest's. Compare configs.
  if [ -n "$have" ] && ctr_ images inspect "$full" >/dev/null 2>&1; then
    config=$(ctr_ content get "$have" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["config"]["digest"])' 2>/dev/null || true)
    [ "$config" = "$want" ] && { echo "present $full"; continue; }
  fi
  started=$SECONDS
  docker save "$image" | ctr_ images import --label io.cri-containerd.pinned=pinned - >/dev/null
  echo "imported $full in $((SECONDS - started)) s"
done
