#!/usr/bin/env bash
# Stop the local cluster: pods first (so their containers and mounts go), then the components;
# leaves nothing running or mounted. The state (etcd, images) stays for a warm start; `--purge`
# removes it too, and the certificate kueue.sh wrote under /etc/kueue.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"

stop() {  # name: SIGTERM, then SIGKILL after a while
  local pidfile=$RUN/$1.pid
  [ -f "$pidfile" ] || return 0
  local pid
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$pidfile"
}

stop kubelet
# Every pod sandbox and container the kubelet left: stop their tasks, then the shims.
if [ -S "$CONTAINERD_SOCK" ]; then
  for task in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$task" >/dev/null 2>&1
  done
  sleep 1
  for task in $(ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$CONTAINERD_SOCK" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1
  done
fi
# Kueue's manager (scripts/cluster/kueue.sh), while the API server it talks to still runs.
stop kueue
stop kube-proxy
# Its Service rules (KUBE-* chains in the nat and filter tables) go with it.
command -v kube-proxy >/dev/null && kube-proxy --cleanup >/dev/null 2>&1
stop coredns
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
stop containerd
pkill -9 -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null
# Mounts under the kubelet's and containerd's folders, deepest first.
for root in "$STATE" "$RUN"; do
  grep -o " $root[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
done
for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ {print $1}'); do ip netns del "$ns" 2>/dev/null; done
ip link del gjcni0 2>/dev/null
if command -v iptables >/dev/null; then
  iptables -D FORWARD -i gjcni0 -o gjcni0 -j ACCEPT 2>/dev/null
  iptables -D FORWARD -i gjcni0 ! -o gjcni0 -j DROP 2>/dev/null
fi
# The kubelet's own chains (KUBE-FIREWALL, jumped to from INPUT and OUTPUT, the canaries and the
# hint), in both families, which it never removes: the jumps to them first, then the chains.
drop_kube_chains() {  # iptables | ip6tables
  command -v "$1" >/dev/null || return 0
  local table chain
  for table in filter nat mangle raw; do
    # xargs reads the rules' quoted comments as iptables printed them.
    "$1" -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -v '^-A KUBE-' |
      sed 's/^-A /-D /' | xargs -r -L1 "$1" -t "$table" 2>/dev/null
    for chain in $("$1" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}'); do
      "$1" -t "$table" -F "$chain" 2>/dev/null
    done
    for chain in $("$1" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}'); do
      "$1" -t "$table" -X "$chain" 2>/dev/null
    done
  done
}
drop_kube_chains iptables
drop_kube_chains ip6tables
rm -rf "$STATE/cni/ipam"
if [ "${1:-}" = --purge ]; then
  rm -rf "$STATE" "$RUN"
  # kueue.sh's metrics certificate, at the path the Kueue binary fixes; only ours is removed.
  certs=/etc/kueue/metrics/certs
  if openssl x509 -noout -subject -in "$certs/tls.crt" 2>/dev/null | grep -q 'CN *= *kueue-local'; then
    rm -f "$certs/tls.crt" "$certs/tls.key"
    rmdir "$certs" /etc/kueue/metrics /etc/kueue 2>/dev/null
  fi
fi
echo "cluster: stopped"
