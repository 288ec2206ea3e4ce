# Where the local cluster keeps its state and how it is addressed; sourced by up.sh and down.sh.
source "$(dirname "${BASH_SOURCE[0]}")/versions.sh"
STATE=${GPUJOBS_CLUSTER_STATE:-/var/lib/gpujobs-cluster}
RUN=${GPUJOBS_CLUSTER_RUN:-/run/gpujobs-cluster}
LOGS=$STATE/logs
PKI=$STATE/pki
# Pods live on a bridge of our own; its gateway is this machine as pods see it: the node's
# address, where the API server, cluster DNS and the host services pods use (gpujobs' API,
# SeaweedFS) listen. Nothing is routed anywhere else (no masquerade).
BRIDGE=gjcni0
POD_CIDR=10.244.0.0/24
NODE_IP=10.244.0.1
SERVICE_CIDR=10.96.0.0/24
DNS_IP=$NODE_IP
NODE_NAME=gpujobs-node
API_PORT=6443
CONTAINERD_SOCK=$RUN/containerd/containerd.sock
KUBECONFIG_ADMIN=$STATE/admin.kubeconfig
PATH=$BIN_DIR:$PATH
