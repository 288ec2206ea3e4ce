#!/usr/bin/env bash
# Build the upstream components of a single-node Kubernetes cluster from the Go module proxy (no
# release binary can be fetched here), into $CLUSTER_CACHE/bin, once per pinned version.
# Each component is built in a throwaway module of its own under $CLUSTER_CACHE/src; Go's build
# and module caches live under ~/.cache too, so a rebuild after a clean clone takes seconds.
set -euo pipefail
source "$(dirname "$0")/versions.sh"

export GOFLAGS=-mod=mod
export GOCACHE=${GOCACHE:-$CACHE_ROOT/go-build}
export GOMODCACHE=${GOMODCACHE:-$CACHE_ROOT/go-mod}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}
mkdir -p "$BIN_DIR" "$SRC_DIR"

stamp_ok() { [ -f "$BIN_DIR/.$1.stamp" ] && [ "$(cat "$BIN_DIR/.$1.stamp")" = "$2" ]; }
stamp() { echo "$2" >"$BIN_DIR/.$1.stamp"; }

# module DIR MODULE VERSION: a throwaway module that requires MODULE@VERSION.
new_module() {
  local dir=$1
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && go mod init gpujobs.local/build >/dev/null 2>&1)
}

# Copy the replace lines of a module's go.mod that point at released versions (not local paths):
# etcd and containerd pin some dependencies this way and do not build without them.
copy_replaces() {  # dir module@version
  local gomod
  gomod=$(go mod download -json "$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  python3 - "$gomod" "$1/go.mod" <<'PY'
import re, sys
src, dst = sys.argv[1], sys.argv[2]
text = open(src).read()
lines = []
for block in re.findall(r"^replace\s*\((.*?)^\)", text, flags=re.S | re.M):
    lines += [l.strip() for l in block.splitlines() if l.strip() and not l.strip().startswith("//")]
lines += [m.strip() for m in re.findall(r"^replace\s+([^(].*)$", text, flags=re.M)]
keep = [l for l in lines if not re.search(r"=>\s*\.", l)]
if keep:
    with open(dst, "a") as f:
        f.write("\nreplace (\n" + "".join(f"\t{l}\n" for l in keep) + ")\n")
PY
}

build_kubernetes() {
  local v=$KUBERNETES_VERSION
  stamp_ok kubernetes "$v" && return
  local dir=$SRC_DIR/kubernetes
  new_module "$dir"
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@v$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  # Every staging module the release's go.mod replaces with ./staging/... is served at v0.MINOR.PATCH.
  local staging_v="v0.${v#1.}"
  {
    echo "require k8s.io/kubernetes v$v"
    grep -oE '^\s*k8s.io/[a-z0-9-]+ => ./staging/src/k8s.io/[a-z0-9-]+' "$gomod" | awk '{print $1}' |
      while read -r m; do echo "require $m $staging_v"; echo "replace $m => $m $staging_v"; done
  } >>"$dir/go.mod"
  cat >"$dir/tools.go" <<GO
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true)
  local pkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version
  local minor=${v#1.}; minor=${minor%%.*}
  local flags="-s -w"
  for p in $pkg $cpkg; do
    flags+=" -X $p.gitVersion=v$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    flags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$dir" && CGO_ENABLED=0 go build -tags tools -trimpath -ldflags "$flags" -o "$BIN_DIR/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl)
  stamp kubernetes "$v"
}

build_simple() {  # name module version cgo tags packages...
  local name=$1 module=$2 v=$3 cgo=$4 tags=$5
  shift 5
  stamp_ok "$name" "$v" && return
  local dir=$SRC_DIR/$name
  new_module "$dir"
  (cd "$dir" && go get "$module@v$v" >/dev/null)
  copy_replaces "$dir" "$module@v$v"
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$dir" && for p in "$@"; do go get "$p@v$v" >/dev/null 2>&1 || true; done)
  (cd "$dir" && CGO_ENABLED=$cgo go build -tags "$tags" -trimpath -ldflags "-s -w" -o "$BIN_DIR/" "$@")
  stamp "$name" "$v"
}

build_etcd() {
  stamp_ok etcd "$ETCD_VERSION" && return
  build_simple etcd-server go.etcd.io/etcd/server/v3 "$ETCD_VERSION" 0 "" go.etcd.io/etcd/server/v3
  mv -f "$BIN_DIR/v3" "$BIN_DIR/etcd" 2>/dev/null || true
  [ -x "$BIN_DIR/etcd" ] || mv -f "$BIN_DIR/server" "$BIN_DIR/etcd"
  stamp etcd "$ETCD_VERSION"
}

build_pause() {
  stamp_ok pause 1 && [ -x "$BIN_DIR/pause" ] && return
  local dir=$SRC_DIR/pause
  mkdir -p "$dir"
  # The sandbox's init: reaps children and waits for a signal, as the upstream pause does.
  cat >"$dir/pause.c" <<'C'
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &q, NULL);
  sigaction(SIGTERM, &q, NULL);
  sigaction(SIGCHLD, &r, NULL);
  for (;;) pause();
}
C
  gcc -Os -static -o "$BIN_DIR/pause" "$dir/pause.c"
  stamp pause 1
}

build_helm() {
  local v=$HELM_VERSION
  stamp_ok helm "$v" && [ -x "$BIN_DIR/helm" ] && return
  local dir=$SRC_DIR/helm
  new_module "$dir"
  # An import of the command keeps `go mod tidy` from dropping the requirement.
  printf '//go:build tools\n\npackage tools\n\nimport _ "helm.sh/helm/v4/cmd/helm"\n' >"$dir/tools.go"
  (cd "$dir" && go get "helm.sh/helm/v4@v$v" >/dev/null 2>&1)
  copy_replaces "$dir" "helm.sh/helm/v4@v$v"
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true)
  # The version stamped as the release's own build stamps it: `helm version` says v$v.
  (cd "$dir" && CGO_ENABLED=0 go build -tags tools -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$v" \
    -o "$BIN_DIR/helm" helm.sh/helm/v4/cmd/helm)
  stamp helm "$v"
}

# Kueue's manager (cmd/kueue). Its CRDs are not built: kueue.sh applies them from the module's
# source in $GOMODCACHE (config/components/crd/bases), the same release as the binary.
build_kueue() {
  local v=$KUEUE_VERSION
  stamp_ok kueue "$v" && [ -x "$BIN_DIR/kueue" ] && return
  local dir=$SRC_DIR/kueue
  new_module "$dir"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kueue/cmd/kueue"\n' >"$dir/tools.go"
  (cd "$dir" && go get "sigs.k8s.io/kueue@v$v" >/dev/null 2>&1)
  copy_replaces "$dir" "sigs.k8s.io/kueue@v$v"
  (cd "$dir" && go mod tidy -e >/dev/null 2>&1 || true)
  # Stamped as the release's own build: the manager logs v$v at start. No `tools` tag here (it
  # is only for tidy): dependencies have tools.go files of their own that import programs.
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v$v" \
    -o "$BIN_DIR/kueue" sigs.k8s.io/kueue/cmd/kueue)
  stamp kueue "$v"
}

# The directory of Kueue's module source (its CRDs and sample configuration), downloaded if absent.
kueue_source() {
  go mod download -json "sigs.k8s.io/kueue@v$KUEUE_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

component=${1:-all}
case $component in
  kubernetes) build_kubernetes ;;
  etcd) build_etcd ;;
  containerd)
    build_simple containerd github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" 0 no_btrfs \
      github.com/containerd/containerd/v2/cmd/containerd \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
      github.com/containerd/containerd/v2/cmd/ctr ;;
  runc)
    build_simple runc github.com/opencontainers/runc "$RUNC_VERSION" 1 seccomp github.com/opencontainers/runc ;;
  cni)
    build_simple cni github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION" 0 "" \
      github.com/containernetworking/plugins/plugins/main/bridge \
      github.com/containernetworking/plugins/plugins/main/loopback \
      github.com/containernetworking/plugins/plugins/ipam/host-local ;;
  coredns)
    build_simple coredns github.com/coredns/coredns "$COREDNS_VERSION" 0 "" github.com/coredns/coredns ;;
  pause) build_pause ;;
  helm) build_helm ;;
  # Not in `all`: only `make kueue` needs it.
  kueue) build_kueue ;;
  kueue-source) kueue_source ;;
  all)
    for c in pause cni runc containerd etcd coredns kubernetes helm; do bash "$0" "$c"; done ;;
  *) echo "unknown component $component" >&2; exit 2 ;;
esac
