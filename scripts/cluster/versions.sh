# Pinned versions of the local cluster's components, and where they are cached (never in the clone).
KUBERNETES_VERSION=1.37.2
ETCD_VERSION=3.6.16
CONTAINERD_VERSION=2.4.2
RUNC_VERSION=1.5.3
CNI_PLUGINS_VERSION=1.10.0
CACHE_ROOT=${GPUJOBS_CACHE:-$HOME/.cache/gpujobs}
CLUSTER_CACHE=$CACHE_ROOT/cluster
BIN_DIR=$CLUSTER_CACHE/bin-k$KUBERNETES_VERSION
SRC_DIR=$CLUSTER_CACHE/src
COREDNS_VERSION=1.14.7
# Helm (helm.sh/helm/v4), for installing the chart on the local cluster (tests/k8s).
HELM_VERSION=4.3.2
# Kueue (sigs.k8s.io/kueue): its manager, run as a process by scripts/cluster/kueue.sh.
KUEUE_VERSION=0.17.0
# The sandbox image: our own pause binary (scripts/cluster/build.sh), never pulled.
PAUSE_IMAGE=docker.io/local/pause:gpujobs-1
