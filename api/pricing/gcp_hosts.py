"""GCP host VMs for accelerator-only price rows.

GCP prices a GPU separately from the VM it is attached to; AWS prices the whole instance. To make
the two comparable, each GCP GPU row is paired with the machine shape GCP sells for it and the
host's price is estimated from per-vCPU and per-GiB rates (N1 on-demand, us-central1:
$0.031611/vCPU-h, $0.004237/GiB-h; e.g. a2-highgpu-1g's host comes to ~$0.74/h, matching its
list price less the A100's). Spot hosts get the same discount as the accelerator row. Limitation:
one rate for every region and machine family, so GCP offers are accurate to a few percent of the
whole-instance price, not exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

VCPU_HOUR = 0.031611
GIB_HOUR = 0.004237


@dataclass(frozen=True, slots=True)
class HostShape:
    instance_type: str
    vcpus: float
    ram_gb: float

    @property
    def on_demand_price(self) -> float:
        return self.vcpus * VCPU_HOUR + self.ram_gb * GIB_HOUR


_G2 = {1: (4, 16), 2: (24, 96), 4: (48, 192), 8: (96, 384)}


def host_for(gpu_model: str, gpu_count: int) -> HostShape | None:
    """The machine GCP attaches `gpu_count` GPUs of `gpu_model` to; None if unknown."""
    n = gpu_count
    match gpu_model:
        case "A100":
            if n == 16:
                return HostShape("a2-megagpu-16g", 96, 1360)
            return HostShape(f"a2-highgpu-{n}g", 12 * n, 85 * n)
        case "A100-80GB":
            return HostShape(f"a2-ultragpu-{n}g", 12 * n, 170 * n)
        case "H100":
            return HostShape(f"a3-highgpu-{n}g", 26 * n, 234 * n)
        case "H100-MEGA":
            return HostShape("a3-megagpu-8g", 208, 1872) if n == 8 else None
        case "H200":
            return HostShape("a3-ultragpu-8g", 224, 2952) if n == 8 else None
        case "B200":
            return HostShape("a4-highgpu-8g", 224, 3968) if n == 8 else None
        case "L4":
            shape = _G2.get(n)
            return HostShape(f"g2-standard-{shape[0]}", *shape) if shape else None
        case "T4" | "V100" | "P100" | "P4":
            # N1 with 8 vCPUs per GPU: the usual training host for N1-attached GPUs.
            return HostShape(f"n1-standard-{8 * n}", 8 * n, 30 * n)
    return None
