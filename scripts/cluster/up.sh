#!/usr/bin/env bash
# Start a single-node Kubernetes cluster of the upstream components, run as processes, the shape of
# upstream hack/local-up-cluster.sh: etcd, kube-apiserver (RBAC, Pod Security admission),
# kube-controller-manager, kube-scheduler, containerd + runc on their own socket and root, kubelet,
# CNI (bridge, host-local, loopback) and CoreDNS. Idempotent: a component already running is left
# as it is, one that stopped is started again.
# Prints the admin kubeconfig's path last. scripts/cluster/down.sh stops it and unmounts everything.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"

log() { echo "cluster: $*" >&2; }

bash "$here/probe.sh"
# A cold start (nothing built, no state) is timed for benchmarks/cluster_start.py --cold-record:
# on a fresh machine make test's own start is the cold figure.
started=$(date +%s)
cold=0
[ -x "$BIN_DIR/kubelet" ] || [ -d "$STATE" ] || cold=1
bash "$here/build.sh" all >&2
mkdir -p "$STATE" "$RUN" "$LOGS" "$PKI"

# -- PKI: one CA; each component a client certificate of its own identity ----------------------
cert() {  # name CN O [SANs]
  local name=$1 cn=$2 org=$3 sans=${4:-}
  [ -f "$PKI/$name.crt" ] && return
  local subj="/CN=$cn"
  [ -n "$org" ] && subj="/O=$org$subj"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" \
    -out "$PKI/$name.csr" 2>/dev/null
  local ext="$PKI/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$sans" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$sans"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
}
if [ ! -f "$PKI/ca.crt" ]; then
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -days 3650 \
    -subj "/CN=gpujobs-local-ca" -out "$PKI/ca.crt" 2>/dev/null
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi
cert apiserver kube-apiserver "" \
  "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:${SERVICE_CIDR%.*}.1"
cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
cert admin admin system:masters
cert controller-manager system:kube-controller-manager ""
cert scheduler system:kube-scheduler ""
cert kubelet "system:node:$NODE_NAME" system:nodes "DNS:$NODE_NAME,IP:$NODE_IP,IP:127.0.0.1"
cert coredns coredns ""
cert kube-proxy system:kube-proxy ""

kubeconfig() {  # name cert
  local file=$STATE/$1.kubeconfig
  cat >"$file" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: local
  context: {cluster: local, user: $1}
current-context: local
YAML
}
kubeconfig admin admin
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler
kubeconfig kubelet kubelet
kubeconfig coredns coredns
kubeconfig kube-proxy kube-proxy

# -- The node's network: a bridge whose address is the node's ----------------------------------
# Pods get a route to the bridge's subnet and to the Service CIDR (through the node, where
# kube-proxy's rules take it), nothing more: no default route.
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
fi
# Read whole before matching: with pipefail, `grep -q` closing the pipe early fails the test.
addresses=$(ip -4 addr show dev "$BRIDGE")
[[ $addresses == *"inet $NODE_IP/"* ]] || ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
ip link set "$BRIDGE" up
sysctl -qw net.ipv4.ip_forward=1
# Pods on the bridge talk to each other (a gang's ranks) and to this machine, nothing else.
if command -v iptables >/dev/null; then
  iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null ||
    iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  iptables -C FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -j DROP 2>/dev/null ||
    iptables -A FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
fi
mkdir -p "$STATE/cni/net.d" "$STATE/cni/bin"
cp -f "$BIN_DIR/bridge" "$BIN_DIR/host-local" "$BIN_DIR/loopback" "$STATE/cni/bin/"
cat >"$STATE/cni/net.d/10-gpujobs.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "gpujobs",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    {"type": "loopback"}
  ]
}
JSON

started() {  # name: is the pid in $RUN/name.pid alive?
  [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null
}
start() {  # name command...
  local name=$1
  shift
  started "$name" && return
  log "starting $name"
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
}
wait_for() {  # what seconds command...
  local what=$1 seconds=$2
  shift 2
  for _ in $(seq 1 $((seconds * 4))); do
    "$@" >/dev/null 2>&1 && return
    sleep 0.25
  done
  log "$what did not come up; the last lines of its log:"
  tail -n 30 "$LOGS/$what.log" >&2 || true
  exit 1
}

# -- etcd ---------------------------------------------------------------------------------------
start etcd etcd --name gpujobs --data-dir "$STATE/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster gpujobs=http://127.0.0.1:2380 --unsafe-no-fsync --quota-backend-bytes 2147483648
wait_for etcd 30 curl -sf http://127.0.0.1:2379/health

# -- API server, controllers, scheduler ---------------------------------------------------------
start kube-apiserver kube-apiserver --etcd-servers http://127.0.0.1:2379 \
  --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$API_PORT" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --authorization-mode Node,RBAC --anonymous-auth=false \
  --enable-admission-plugins NodeRestriction \
  --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" \
  --tls-private-key-file "$PKI/apiserver.key" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --allow-privileged=true --profiling=false
wait_for kube-apiserver 90 kubectl --kubeconfig "$KUBECONFIG_ADMIN" get --raw /readyz

start kube-controller-manager kube-controller-manager --kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --service-cluster-ip-range "$SERVICE_CIDR"
# Pods need their namespace's default service account, which the controller manager makes.
wait_for kube-controller-manager 60 kubectl --kubeconfig "$KUBECONFIG_ADMIN" get serviceaccount default -n default
start kube-scheduler kube-scheduler --kubeconfig "$STATE/scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false

# -- containerd + runc, apart from Docker's ------------------------------------------------------
mkdir -p "$RUN/containerd" "$STATE/containerd"
cat >"$STATE/containerd.toml" <<TOML
version = 3
root = "$STATE/containerd/root"
state = "$RUN/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  disable_apparmor = true
  # No CAP_SYS_RESOURCE here (a sandbox's own limit): no process may lower its oom_score_adj
  # below ours, which runc does for the pause container (-998) unless told not to.
  restrict_oom_score_adj = true
  tolerate_missing_hugetlb_controller = true
  disable_hugetlb_controller = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$BIN_DIR/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$STATE/cni/bin"]
    conf_dir = "$STATE/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
TOML
start containerd containerd --config "$STATE/containerd.toml"
wait_for containerd 30 ctr --address "$CONTAINERD_SOCK" version

# -- Images: no registry; the pause image is ours, imported into the k8s.io namespace -----------
bash "$here/images.sh" pause >&2

# -- CoreDNS on the node's address: pod DNS (a gang's rendezvous resolves <job>-0.<service>) ----
cat >"$STATE/Corefile" <<COREFILE
cluster.local:53 in-addr.arpa:53 {
    bind $DNS_IP
    errors
    kubernetes cluster.local in-addr.arpa {
        kubeconfig $STATE/coredns.kubeconfig local
        pods insecure
        ttl 5
    }
}
.:53 {
    bind $DNS_IP
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
COREFILE
kubectl --kubeconfig "$KUBECONFIG_ADMIN" apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gpujobs-local-coredns}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gpujobs-local-coredns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpujobs-local-coredns}
subjects:
- {kind: User, name: coredns}
YAML
start coredns coredns -conf "$STATE/Corefile"

# -- kube-proxy: ClusterIP Services (the Helm chart's API Service, as trainer pods reach it) -------
# iptables mode. --masquerade-all: a pod that reaches a Service backed by a pod on the same bridge
# gets the reply through this machine (no br_netfilter needed to see bridged replies). No
# conntrack sysctls are written (--conntrack-max-per-core 0): a sandbox may not.
start kube-proxy kube-proxy --kubeconfig "$STATE/kube-proxy.kubeconfig" --proxy-mode iptables \
  --cluster-cidr "$POD_CIDR" --masquerade-all --hostname-override "$NODE_NAME" \
  --bind-address 127.0.0.1 --healthz-bind-address 127.0.0.1:10256 \
  --metrics-bind-address 127.0.0.1:10249 --conntrack-max-per-core 0 \
  --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
  --nodeport-addresses primary --iptables-localhost-nodeports=false

# -- kubelet ------------------------------------------------------------------------------------
cgroup_v1=true
[ -f /sys/fs/cgroup/cgroup.controllers ] && cgroup_v1=false
cat >"$STATE/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: $( $cgroup_v1 && echo false || echo true )
failSwapOn: false
address: $NODE_IP
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: /dev/null
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
# As kind sets them: no eviction on disk pressure, no image garbage collection (the images
# cannot be pulled again), a pid bound per pod (a fork bomb stays in its pod).
evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%"}
imageGCHighThresholdPercent: 100
podPidsLimit: 4096
maxPods: 60
serializeImagePulls: false
containerLogMaxSize: 50Mi
YAML
start kubelet kubelet --config "$STATE/kubelet.yaml" --kubeconfig "$STATE/kubelet.kubeconfig" \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --root-dir "$STATE/kubelet" \
  --cert-dir "$PKI/kubelet-certs"
node_ready() {
  kubectl --kubeconfig "$KUBECONFIG_ADMIN" get node "$NODE_NAME" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep True >/dev/null
}
wait_for kubelet 120 node_ready
if [ "$cold" = 1 ]; then
  printf '{"seconds": %s, "measured_on": "%s", "cpus": %s}\n' "$(($(date +%s) - started))" \
    "$(date -u +%F)" "$(nproc)" >>"$CLUSTER_CACHE/cold-starts.jsonl"
fi
echo "$KUBECONFIG_ADMIN"
