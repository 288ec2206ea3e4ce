"""/v1/catalog: the offers the scheduler can choose from."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import StringConstraints

from api.catalog import service
from api.http import ERROR_RESPONSES, PrincipalDep, respond
from gpujobs.plans import OfferList
from gpujobs.spec import CapacityType

router = APIRouter(prefix="/v1/catalog", tags=["catalog"], responses=ERROR_RESPONSES)

Name = Annotated[str, StringConstraints(min_length=1, max_length=40)]


@router.get("/offers", response_model=OfferList)
def list_offers(
    principal: PrincipalDep,
    gpu_model: Annotated[
        list[Name] | None, Query(description="e.g. A100; repeat the parameter for any of several.")
    ] = None,
    min_gpu_memory_gb: Annotated[
        float | None, Query(gt=0, le=4096, description="Per GPU, GiB.")
    ] = None,
    gpu_count: Annotated[int | None, Query(ge=1, le=64, description="GPUs per node.")] = None,
    region: Annotated[list[Name] | None, Query(description="e.g. us-east-1; repeatable.")] = None,
    cloud: Annotated[list[Name] | None, Query(description="aws or gcp; repeatable.")] = None,
    capacity: Annotated[
        CapacityType | None, Query(description="Only offers sold on it, cheapest first on it.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Response:
    # Any authenticated token may read the catalog.
    return respond(
        service.offers(
            gpu_models=gpu_model or [],
            min_gpu_memory_gb=min_gpu_memory_gb,
            gpu_count=gpu_count,
            regions=region or [],
            clouds=cloud or [],
            capacity=capacity,
            limit=limit,
        )
    )
