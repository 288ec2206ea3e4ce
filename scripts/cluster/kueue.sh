#!/usr/bin/env bash
# Kueue on the local cluster (scripts/cluster/up.sh must have run): its CRDs, its manager run as a
# process of this machine like the other components, fake GPUs on the node, and the queues the
# tests submit to. Idempotent: what exists is left as it is, a manager that stopped is started
# again. scripts/cluster/down.sh stops the manager.
#
# Queues: one ResourceFlavor per capacity type (spot, on-demand) and a ClusterQueue "gpujobs"
# with 1 GPU of each (2 in all, of the node's 4 fake ones: a third Job waits for quota), with
# preemption of lower priorities inside the queue. LocalQueues are namespaced: the tests make
# their own in their namespace; KUEUE_LOCAL_QUEUE_NAMESPACES names others to make one in.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"

log() { echo "kueue: $*" >&2; }

bash "$here/build.sh" kueue >&2
src=$(bash "$here/build.sh" kueue-source)
kubectl() { command kubectl --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
kubectl get --raw /readyz >/dev/null || { log "the cluster is not up (make cluster)"; exit 1; }

KUEUE=$STATE/kueue
mkdir -p "$KUEUE/certs" "$RUN" "$LOGS"

# -- CRDs, from the module source of the release the binary was built from ----------------------
# Server-side: the Workload CRD is larger than client-side apply's last-applied annotation allows.
kubectl apply --server-side --force-conflicts -f "$src/config/components/crd/bases/" >/dev/null
for crd in $(ls "$src/config/components/crd/bases/" | sed -E 's/^kueue.x-k8s.io_(.*)\.yaml$/\1.kueue.x-k8s.io/'); do
  kubectl wait --for condition=Established --timeout 60s "crd/$crd" >/dev/null
done

# -- Its identity: a client certificate of its own, bound to the release's manager ClusterRole ----
if [ ! -f "$PKI/kueue.crt" ]; then
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/kueue.key" -subj "/CN=system:kueue" \
    -out "$PKI/kueue.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    >"$PKI/kueue.ext"
  openssl x509 -req -in "$PKI/kueue.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -extfile "$PKI/kueue.ext" -out "$PKI/kueue.crt" 2>/dev/null
fi
cat >"$STATE/kueue.kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: kueue
  user:
    client-certificate: $PKI/kueue.crt
    client-key: $PKI/kueue.key
contexts:
- name: local
  context: {cluster: local, user: kueue}
current-context: local
YAML
# The release's own roles (what its Deployment's service account gets), renamed for this cluster:
# the manager's, and the metrics endpoint's token and access reviews.
for role in role metrics_auth_role; do
  sed -E 's/^  name: .*/  name: gpujobs-local-kueue-'"${role//_/-}"'/' \
    "$src/config/components/rbac/$role.yaml" | kubectl apply -f - >/dev/null
  kubectl apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gpujobs-local-kueue-${role//_/-}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpujobs-local-kueue-${role//_/-}}
subjects:
- {kind: User, name: "system:kueue"}
YAML
done
# Its own namespace, whose Secrets its manager watches (the release's Role there, as kustomize
# places it: "system" is the release's placeholder for kueue-system).
kubectl get namespace kueue-system >/dev/null 2>&1 || kubectl create namespace kueue-system >/dev/null
sed -E 's/^  name: .*/  name: gpujobs-local-kueue-secrets/; s/^  namespace: system$/  namespace: kueue-system/' \
  "$src/config/components/rbac/manager_secrets_role.yaml" | kubectl apply -f - >/dev/null
kubectl apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: gpujobs-local-kueue-secrets, namespace: kueue-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gpujobs-local-kueue-secrets}
subjects:
- {kind: User, name: "system:kueue"}
YAML

# -- Serving certificates -----------------------------------------------------------------------
# No webhook configuration is registered, so the API server never calls Kueue's webhooks: our
# launcher creates its Jobs suspended and labelled itself, which is all the Job defaulting
# webhook would do, and the queue objects below are written by us. The manager still starts its
# webhook server and will not run without a certificate, so it gets a self-signed one (internal
# certificate management off: it would write the webhook configurations it rotates). Its
# metrics server reads one from a path the binary fixes, /etc/kueue/metrics/certs.
self_signed() {  # dir
  [ -f "$1/tls.crt" ] && return
  mkdir -p "$1"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$1/tls.key" -out "$1/tls.crt" \
    -days 3650 -subj "/CN=kueue-local" -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
}
self_signed "$KUEUE/certs"
self_signed /etc/kueue/metrics/certs

# -- The manager --------------------------------------------------------------------------------
# Only Jobs that carry a queue label are Kueue's; only batch/job is integrated. Everything binds
# to the loopback on ports of its own; one manager, so no leader election; the visibility API
# (an aggregated API server nobody registers here) is off.
cat >"$KUEUE/config.yaml" <<YAML
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: false
internalCertManagement:
  enable: false
leaderElection:
  leaderElect: false
health:
  healthProbeBindAddress: 127.0.0.1:18081
metrics:
  bindAddress: 127.0.0.1:18443
webhook:
  host: 127.0.0.1
  port: 19443
  certDir: $KUEUE/certs
integrations:
  frameworks: ["batch/job"]
featureGates:
  VisibilityOnDemand: false
YAML
if ! { [ -f "$RUN/kueue.pid" ] && kill -0 "$(cat "$RUN/kueue.pid")" 2>/dev/null; }; then
  log "starting kueue"
  KUBECONFIG=$STATE/kueue.kubeconfig setsid "$BIN_DIR/kueue" --config "$KUEUE/config.yaml" \
    >"$LOGS/kueue.log" 2>&1 </dev/null &
  echo $! >"$RUN/kueue.pid"
fi
for _ in $(seq 1 240); do
  curl -sf http://127.0.0.1:18081/readyz >/dev/null 2>&1 && break
  kill -0 "$(cat "$RUN/kueue.pid")" 2>/dev/null || break
  sleep 0.25
done
if ! curl -sf http://127.0.0.1:18081/readyz >/dev/null 2>&1; then
  log "the manager did not come up; the last lines of its log:"
  tail -n 30 "$LOGS/kueue.log" >&2
  exit 1
fi

# -- Fake GPUs: an extended resource on the node's status, as test clusters fake them -----------
# The kubelet keeps an extended resource it does not manage across its status updates, but a
# node registered anew (its object deleted) loses it: running this script again restores it.
kubectl patch node "$NODE_NAME" --subresource status --type merge \
  -p '{"status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}}' >/dev/null

# -- Flavors and queues -------------------------------------------------------------------------
# A flavor is tied to nodes by their labels; this node carries no capacity-type label (the tests
# label it gpujobs.dev/local-capacity=any for every type), so neither flavor names one.
kubectl apply -f - >/dev/null <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: spot}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: on-demand}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpujobs}
spec:
  namespaceSelector: {}
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: spot
      resources:
      - {name: cpu, nominalQuota: 16}
      - {name: memory, nominalQuota: 64Gi}
      - {name: nvidia.com/gpu, nominalQuota: 1}
    - name: on-demand
      resources:
      - {name: cpu, nominalQuota: 16}
      - {name: memory, nominalQuota: 64Gi}
      - {name: nvidia.com/gpu, nominalQuota: 1}
---
# Kueue orders and preempts by the pods' PriorityClass: gpujobs' launcher names one per setting.
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gpujobs-kueue-high}
value: 1000
globalDefault: false
preemptionPolicy: PreemptLowerPriority
description: "A Job that takes Kueue quota from lower priorities (tests/k8s/test_real_kueue.py)."
YAML
for ns in ${KUEUE_LOCAL_QUEUE_NAMESPACES:-}; do
  kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
  kubectl apply -f - >/dev/null <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: gpujobs, namespace: $ns}
spec: {clusterQueue: gpujobs}
YAML
done
kubectl wait --for condition=Active --timeout 60s clusterqueue/gpujobs >/dev/null
log "running (ClusterQueue gpujobs; log $LOGS/kueue.log)"
