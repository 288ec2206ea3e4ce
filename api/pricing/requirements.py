"""What a job's resources ask of an offer: the one offer filter, one rule per field.

Placement (api.placement.candidates), feasibility (which names the first rule nothing meets)
and the catalog endpoint (catalog.find_offers) all match offers with these rules. Model, cloud
and region match case-insensitively and exactly (`A100` is not `A100-80GB`); memory is per GPU;
an offer is one node, so it has exactly `gpus_per_node` GPUs.
"""

from __future__ import annotations

from collections.abc import Callable

from api.pricing.offers import Offer
from gpujobs.spec import ResourcesSpec

# (models, min GPU memory, GPUs per node, nodes, clouds, regions); None: any.
Requirement = tuple[
    tuple[str, ...] | None,
    float | None,
    int | None,
    int,
    tuple[str, ...] | None,
    tuple[str, ...] | None,
]


Match = Callable[[Offer, Requirement], bool]

# The one offer filter, one rule per resources field (feasibility names the first one that
# nothing meets). Model, cloud and region match case-insensitively; memory is per GPU; an offer
# is one node, so it must have exactly `gpus_per_node` GPUs.
FILTERS: tuple[tuple[str, Match], ...] = (
    ("gpu_models", lambda o, r: r[0] is None or o.gpu_model.lower() in r[0]),
    (
        "min_gpu_memory_gb",
        lambda o, r: r[1] is None or (o.gpu_memory_gb is not None and o.gpu_memory_gb >= r[1]),
    ),
    ("gpus_per_node", lambda o, r: r[2] is None or o.gpu_count == r[2]),
    ("clouds", lambda o, r: r[4] is None or o.cloud.lower() in r[4]),
    ("regions", lambda o, r: r[5] is None or o.region.lower() in r[5]),
)


RULES: dict[str, Match] = dict(FILTERS)


def matches(offer: Offer, key: Requirement) -> bool:
    return all(keep(offer, key) for _, keep in FILTERS)


def requirement(resources: ResourcesSpec) -> Requirement:
    def norm(values: list[str] | None) -> tuple[str, ...] | None:
        return None if values is None else tuple(sorted(v.lower() for v in values))

    return (
        norm(resources.gpu_models),
        resources.min_gpu_memory_gb,
        resources.gpus_per_node,
        resources.nodes,
        norm(resources.clouds),
        norm(resources.regions),
    )
