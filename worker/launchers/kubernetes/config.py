"""How the Kubernetes launcher shapes its objects: one frozen value, built from `Settings`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from gpujobs.spec import CapacityType

if TYPE_CHECKING:
    from api.settings import Settings

DEFAULT_CAPACITY_TYPE_VALUES: Mapping[CapacityType, str | None] = MappingProxyType(
    {
        # Karpenter's values; `reserved` is what Karpenter (>= 1.3) puts on nodes it launches
        # into a capacity reservation.
        CapacityType.SPOT: "spot",
        CapacityType.ON_DEMAND: "on-demand",
        CapacityType.RESERVED: "reserved",
    }
)


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = "NoSchedule"


# GPU node pools are usually tainted so that only pods asking for GPUs land there.
DEFAULT_TOLERATIONS: tuple[Toleration, ...] = (Toleration(key="nvidia.com/gpu"),)


@dataclass(frozen=True)
class KubernetesLauncherConfig:
    namespace: str = "gpujobs"
    default_image: str = "ghcr.io/gpujobs/trainer:latest"
    instance_type_label: str = "node.kubernetes.io/instance-type"
    capacity_type_label: str = "karpenter.sh/capacity-type"
    # A capacity type mapped to None places no capacity constraint (for clusters whose nodes
    # carry no such label for, say, reserved capacity).
    capacity_type_values: Mapping[CapacityType, str | None] = field(
        default_factory=lambda: DEFAULT_CAPACITY_TYPE_VALUES
    )
    # Pin the pod to the offer's zone with this label; None leaves the zone to the cluster.
    zone_label: str | None = None
    tolerations: tuple[Toleration, ...] = DEFAULT_TOLERATIONS
    # Added for spot attempts only, e.g. GKE's `cloud.google.com/gke-spot` taint.
    spot_tolerations: tuple[Toleration, ...] = ()
    # The spot notice: how long the trainer has after SIGTERM to checkpoint before SIGKILL.
    termination_grace_s: int = 120
    unschedulable_timeout_s: float = 600.0
    kueue_queue: str | None = None
    service_account: str | None = None
    # Existing Secret whose keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) become env vars.
    s3_credentials_secret: str | None = None
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

    def capacity_type_value(self, capacity_type: CapacityType) -> str | None:
        return self.capacity_type_values.get(capacity_type)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> KubernetesLauncherConfig:
        """The `k8s_*` settings; `overrides` fill in what `Settings` does not carry (yet)."""
        values: dict[str, Any] = {
            "namespace": settings.k8s_namespace,
            "default_image": settings.trainer_image,
            "instance_type_label": settings.k8s_instance_type_label,
            "capacity_type_label": settings.k8s_capacity_type_label,
            "termination_grace_s": settings.k8s_termination_grace_s,
            "unschedulable_timeout_s": settings.k8s_unschedulable_timeout_s,
            "kueue_queue": settings.k8s_kueue_queue or None,
            "service_account": settings.k8s_service_account or None,
            "s3_credentials_secret": settings.k8s_s3_credentials_secret or None,
            # Only an explicit public URL is useful in-cluster: the host:port fallback is the
            # API's own bind address.
            "api_url": settings.public_url or None,
        }
        values.update(overrides)
        return cls(**values)
