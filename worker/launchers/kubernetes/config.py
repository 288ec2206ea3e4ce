"""How the Kubernetes launcher shapes its objects: one frozen value, built from `Settings`.

Capacity profiles: how each kind of cluster tells spot nodes from on-demand ones. Karpenter and
EKS managed node groups label every node with its capacity type; GKE labels spot (and legacy
preemptible) nodes only, so on-demand is "neither label"; AKS labels and taints spot nodes. GKE
and AKS give a 30 s notice (against AWS's 2 minutes), hence their shorter grace period.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from gpujobs.spec import CapacityType

if TYPE_CHECKING:
    from api.settings import Settings

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
_EFFECTS: Mapping[str, Effect] = MappingProxyType(
    {"NoSchedule": "NoSchedule", "PreferNoSchedule": "PreferNoSchedule", "NoExecute": "NoExecute"}
)


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Effect | None = "NoSchedule"

    @classmethod
    def of_taint(cls, taint: str) -> Toleration:
        """Tolerate a taint written as `kubectl taint` does: key[=value]:Effect."""
        spec, _, name = taint.rpartition(":")
        key, sep, value = spec.partition("=")
        effect = _EFFECTS.get(name)
        if effect is None or not key:
            raise ValueError(f"not a taint (key[=value]:Effect): {taint!r}")
        if sep:
            return cls(key=key, operator="Equal", value=value, effect=effect)
        return cls(key=key, effect=effect)


@dataclass(frozen=True)
class NodeRequirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class CapacityPlacement:
    """What a pod asks of its node for one capacity type."""

    # Exact labels (nodeSelector).
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Node affinity: the node must match one of these terms (each a list of requirements).
    any_of: tuple[tuple[NodeRequirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class CapacityProfile:
    name: str
    placements: Mapping[CapacityType, CapacityPlacement]
    termination_grace_s: int

    def placement(self, capacity_type: CapacityType) -> CapacityPlacement:
        return self.placements.get(capacity_type, CapacityPlacement())


def _labelled(
    label: str, values: Mapping[CapacityType, str]
) -> dict[CapacityType, CapacityPlacement]:
    return {kind: CapacityPlacement(labels={label: value}) for kind, value in values.items()}


KARPENTER_LABEL = "karpenter.sh/capacity-type"
# Karpenter's values; `reserved` is what Karpenter (>= 1.3) puts on nodes it launches into a
# capacity reservation.
KARPENTER_VALUES: Mapping[CapacityType, str] = MappingProxyType(
    {
        CapacityType.SPOT: "spot",
        CapacityType.ON_DEMAND: "on-demand",
        CapacityType.RESERVED: "reserved",
    }
)
EKS_LABEL = "eks.amazonaws.com/capacityType"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GKE_PREEMPTIBLE_LABEL = "cloud.google.com/gke-preemptible"
AKS_PRIORITY_LABEL = "kubernetes.azure.com/scalesetpriority"

_GKE_NOT_SPOT = CapacityPlacement(
    any_of=(
        (
            NodeRequirement(GKE_SPOT_LABEL, "DoesNotExist"),
            NodeRequirement(GKE_PREEMPTIBLE_LABEL, "DoesNotExist"),
        ),
    )
)
# Regular AKS pools carry no priority label; NotIn also matches an absent label.
_AKS_NOT_SPOT = CapacityPlacement(
    any_of=((NodeRequirement(AKS_PRIORITY_LABEL, "NotIn", ("spot",)),),)
)

PROFILES: Mapping[str, CapacityProfile] = MappingProxyType(
    {
        "karpenter": CapacityProfile(
            "karpenter", _labelled(KARPENTER_LABEL, KARPENTER_VALUES), termination_grace_s=120
        ),
        "eks": CapacityProfile(
            "eks",
            _labelled(
                EKS_LABEL,
                {
                    CapacityType.SPOT: "SPOT",
                    CapacityType.ON_DEMAND: "ON_DEMAND",
                    # EC2 Capacity Blocks for ML, the reservations node groups can use.
                    CapacityType.RESERVED: "CAPACITY_BLOCK",
                },
            ),
            termination_grace_s=120,
        ),
        "gke": CapacityProfile(
            "gke",
            {
                CapacityType.SPOT: CapacityPlacement(
                    # Spot VMs, or the older preemptible VMs: both are reclaimed with notice.
                    any_of=(
                        (NodeRequirement(GKE_SPOT_LABEL, "In", ("true",)),),
                        (NodeRequirement(GKE_PREEMPTIBLE_LABEL, "In", ("true",)),),
                    ),
                    # GKE adds no taint itself, but spot pools are commonly tainted so.
                    tolerations=(
                        Toleration(GKE_SPOT_LABEL, "Equal", "true"),
                        Toleration(GKE_PREEMPTIBLE_LABEL, "Equal", "true"),
                    ),
                ),
                CapacityType.ON_DEMAND: _GKE_NOT_SPOT,
                # Reservations are consumed by matching on-demand VMs.
                CapacityType.RESERVED: _GKE_NOT_SPOT,
            },
            # 30 s notice; graceful node shutdown leaves regular pods less than that.
            termination_grace_s=25,
        ),
        "aks": CapacityProfile(
            "aks",
            {
                CapacityType.SPOT: CapacityPlacement(
                    labels={AKS_PRIORITY_LABEL: "spot"},
                    # AKS taints every spot pool so.
                    tolerations=(Toleration(AKS_PRIORITY_LABEL, "Equal", "spot"),),
                ),
                CapacityType.ON_DEMAND: _AKS_NOT_SPOT,
                # Azure reservations are a billing discount on regular VMs.
                CapacityType.RESERVED: _AKS_NOT_SPOT,
            },
            termination_grace_s=25,  # Azure's eviction notice is 30 s
        ),
    }
)


def custom_profile(label: str, values: Mapping[CapacityType, str]) -> CapacityProfile:
    return CapacityProfile(
        "custom", _labelled(label, {**KARPENTER_VALUES, **values}), termination_grace_s=120
    )


def profile_from_settings(settings: Settings) -> CapacityProfile:
    k8s = settings.kubernetes
    if k8s.k8s_capacity_profile == "custom":
        values = {CapacityType(k): v for k, v in k8s.k8s_capacity_type_values.items()}
        return custom_profile(k8s.k8s_capacity_type_label, values)
    return PROFILES[k8s.k8s_capacity_profile]


# GPU node pools are usually tainted so that only pods asking for GPUs land there.
DEFAULT_TOLERATIONS: tuple[Toleration, ...] = (Toleration(key="nvidia.com/gpu"),)


@dataclass(frozen=True)
class TrainerResources:
    """What a trainer pod requests besides GPUs, so the kubelet never takes it for BestEffort."""

    cpu_per_gpu: float = 4.0
    memory_gib_per_gpu: float = 16.0
    # Guaranteed QoS (limits = requests) is evicted last under node pressure.
    guaranteed: bool = False
    shm_size_gib: float = 8.0

    def requests(self, gpus: int) -> dict[str, str]:
        units = max(gpus, 1)
        return {
            "cpu": f"{round(self.cpu_per_gpu * units * 1000)}m",
            "memory": f"{round(self.memory_gib_per_gpu * units * 1024)}Mi",
        }

    @property
    def shm_size(self) -> str:
        return f"{round(self.shm_size_gib * 1024)}Mi"


@dataclass(frozen=True)
class TrainerS3Keys:
    """Static S3 keys for trainers only: copied into each attempt's own Secret."""

    access_key_id: str
    secret_access_key: str = field(repr=False)


@dataclass(frozen=True)
class KubernetesLauncherConfig:
    namespace: str = "gpujobs"
    default_image: str = "ghcr.io/gpujobs/trainer:latest"
    instance_type_label: str = "node.kubernetes.io/instance-type"
    capacity_profile: CapacityProfile = PROFILES["karpenter"]
    # Pin the pod to the offer's zone with this label; None leaves the zone to the cluster.
    zone_label: str | None = None
    tolerations: tuple[Toleration, ...] = DEFAULT_TOLERATIONS
    # Added for spot attempts only, besides the profile's (e.g. a site-specific spot taint).
    spot_tolerations: tuple[Toleration, ...] = ()
    # The spot notice: how long the trainer has after SIGTERM to checkpoint before SIGKILL;
    # None = the profile's.
    termination_grace_s: int | None = None
    unschedulable_timeout_s: float = 600.0
    # Believe the cluster autoscaler's "no node will be added" before the timeout.
    autoscaler_verdict: bool = True
    # A scheduled pod whose container never starts (bad image, missing config) is given up.
    start_timeout_s: float = 300.0
    kueue_queue: str | None = None
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    resources: TrainerResources = TrainerResources()
    run_as_user: int = 10001
    trainer_s3_keys: TrainerS3Keys | None = None
    token_secret_prefix: str = "gpujobs-token-"
    # URL pods use to reach the API (in-cluster DNS); overrides the run config's when set.
    api_url: str | None = None
    master_port: int = 29500
    # Finished Jobs are garbage-collected after this long; the reconciler must have seen them
    # by then, or the attempt reads as lost.
    ttl_seconds_after_finished: int | None = 7 * 24 * 3600
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    priority_class_name: str | None = None
    extra_labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def grace_s(self) -> int:
        if self.termination_grace_s is not None:
            return self.termination_grace_s
        return self.capacity_profile.termination_grace_s

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> KubernetesLauncherConfig:
        """The `k8s_*` settings; `overrides` fill in what `Settings` does not carry (yet)."""
        k8s = settings.kubernetes
        keys = None
        if k8s.k8s_trainer_s3_access_key_id:
            keys = TrainerS3Keys(
                k8s.k8s_trainer_s3_access_key_id, k8s.k8s_trainer_s3_secret_access_key
            )
        values: dict[str, Any] = {
            "namespace": k8s.k8s_namespace,
            "default_image": k8s.trainer_image,
            "instance_type_label": k8s.k8s_instance_type_label,
            "capacity_profile": profile_from_settings(settings),
            "spot_tolerations": tuple(Toleration.of_taint(t) for t in k8s.k8s_spot_taints),
            "termination_grace_s": k8s.k8s_termination_grace_s or None,
            "unschedulable_timeout_s": k8s.k8s_unschedulable_timeout_s,
            "autoscaler_verdict": k8s.k8s_autoscaler_verdict,
            "start_timeout_s": k8s.k8s_start_timeout_s,
            "kueue_queue": k8s.k8s_kueue_queue or None,
            "service_account": k8s.k8s_service_account or None,
            "image_pull_secrets": tuple(k8s.k8s_image_pull_secrets),
            "resources": TrainerResources(
                cpu_per_gpu=k8s.k8s_cpu_per_gpu,
                memory_gib_per_gpu=k8s.k8s_memory_gib_per_gpu,
                guaranteed=k8s.k8s_trainer_qos == "guaranteed",
                shm_size_gib=k8s.k8s_shm_size_gib,
            ),
            "run_as_user": k8s.k8s_run_as_user,
            "trainer_s3_keys": keys,
            # Only an explicit public URL is useful in-cluster: the host:port fallback is the
            # API's own bind address.
            "api_url": settings.public_url or None,
        }
        values.update(overrides)
        return cls(**values)
