"""Feasibility rules over the shipped catalog, without a database."""

from __future__ import annotations

import pytest

from api.errors import InvalidRequest
from api.estimates.feasibility import Slot, check
from api.pricing.catalog import default_catalog
from gpujobs.spec import JobSpec


def spec(**overrides: object) -> JobSpec:
    return JobSpec.model_validate({"name": "f", "trainer": {"steps": 1}, **overrides})


def refused(job: JobSpec, slots: list[Slot] | None = None) -> tuple[str, str]:
    with pytest.raises(InvalidRequest) as raised:
        check(job, default_catalog(), slots=lambda: slots or [])
    (field,) = raised.value.fields
    return field.field, field.reason


def test_the_first_unmet_requirement_is_named_with_what_exists() -> None:
    field, reason = refused(spec(resources={"gpu_models": ["T4"], "min_gpu_memory_gb": 40}))
    assert field == "resources.min_gpu_memory_gb" and "16 GiB" in reason
    field, reason = refused(spec(resources={"gpu_models": ["T4"], "gpus_per_node": 3}))
    assert field == "resources.gpus_per_node" and "1, 2, 4" in reason
    field, reason = refused(spec(resources={"clouds": ["azure"]}))
    assert field == "resources.clouds" and "aws, gcp" in reason


def test_price_cap_and_capacity_types() -> None:
    t4 = {"gpu_models": ["T4"], "nodes": 2}
    field, reason = refused(spec(resources=t4, capacity={"max_price_per_hour": 0.05}))
    assert field == "capacity.max_price_per_hour" and "2 x" in reason
    field, _ = refused(spec(resources=t4, capacity={"types": ["reserved"]}))
    assert field == "capacity.types"
    # a reservation in a matching zone makes reserved-only runnable, if it can hold the nodes
    slot = Slot("use1-az5", "g4dn.xlarge", 2)
    assert check(
        spec(resources=t4, capacity={"types": ["reserved"]}),
        default_catalog(),
        slots=lambda: [slot],
    )
    small = Slot("use1-az5", "g4dn.xlarge", 1)
    assert (
        refused(spec(resources=t4, capacity={"types": ["reserved"]}), [small])[0]
        == "capacity.types"
    )
