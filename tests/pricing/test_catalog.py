import csv
from pathlib import Path

import pytest

from api.pricing.build_catalog import aws_offers, gcp_offers
from api.pricing.catalog import clean_offers, default_catalog, find_offers, parse_catalog
from gpujobs.spec import CapacityType

HEADER = (
    "cloud,region,zone,instance_type,gpu_model,gpu_count,gpu_memory_gb,vcpus,ram_gb,"
    "on_demand_price,spot_price,host_estimated\n"
)
ODD = HEADER + (
    "aws,us-east-1,use1-az1,p3.2xlarge,V100,1,16,8,61,3.06,0.97,0\n"
    "aws,us-east-1,use1-az2,p3.2xlarge,V100,1,16,8,61,3.06,3.50,0\n"  # spot above on-demand
    "aws,us-east-1,use1-az3,p3.2xlarge,V100,1,16,8,61,,,0\n"  # no price at all
    "aws,us-east-1,use1-az4,p3.2xlarge,V100,1,16,8,61,,0.9,0\n"  # spot only
    "aws,us-east-1,use1-az5,p4de.24xlarge,A100-80GB,8,80,96,1152,40.9,,0\n"
    "aws,us-east-1,use1-az5,p4de.24xlarge,A100-80GB,8,,96,1152,41.5,7.8,0\n"  # duplicate
    "aws,us-east-1,use1-az6,p3.2xlarge,V100,not-a-number,16,8,61,3.06,0.9,0\n"
    "gcp,us-central1,us-central1-a,a2-highgpu-1g,A100,1,40,12,85,3.67,1.2,1\n"
)


def test_odd_rows_are_handled_not_fatal() -> None:
    catalog = parse_catalog("# provenance comment\n" + ODD)
    by_zone = {o.zone: o for o in catalog.offers}
    assert by_zone["use1-az1"].spot_price == 0.97
    assert by_zone["use1-az2"].spot_price is None  # spot >= on-demand dropped
    assert by_zone["use1-az2"].on_demand_price == 3.06
    assert "use1-az3" not in by_zone  # nothing to sell
    assert by_zone["use1-az4"].on_demand_price is None and by_zone["use1-az4"].spot_price == 0.9
    p4de = by_zone["use1-az5"]  # merged: cheapest of each price, memory kept
    assert (p4de.on_demand_price, p4de.spot_price, p4de.gpu_memory_gb) == (40.9, 7.8, 80.0)
    assert "use1-az6" not in by_zone
    assert by_zone["us-central1-a"].host_estimated
    assert catalog.skipped == 3  # unparseable, no price, merged duplicate


def test_raw_source_rows_take_memory_from_gpuinfo_and_dedupe_p4de() -> None:
    info_a = "\"{'Gpus': [{'Name': 'A100-80GB', 'MemoryInfo': {'SizeInMiB': 81920}}]}\""
    info_b = "\"{'Gpus': [{'Name': 'A100', 'MemoryInfo': {'SizeInMiB': 81920}}]}\""
    raw = (
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
        "Region,AvailabilityZone\n"
        f"p4de.24xlarge,A100-80GB,8.0,96.0,1152.0,{info_a},40.96575,,us-east-1,use1-az4\n"
        f"p4de.24xlarge,A100-80GB,8.0,96.0,1152.0,{info_b},40.96575,7.8074,us-east-1,use1-az4\n"
    )
    (offer,) = clean_offers(aws_offers(raw))
    assert offer.gpu_memory_gb == 80.0 and offer.spot_price == 7.8074 and offer.gpu_count == 8


def test_gcp_rows_get_a_host_vm_added() -> None:
    raw = (
        "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,"
        "AvailabilityZone,Price,SpotPrice\n"
        ",,,A100,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]},us-central1,us-central1-a,"
        "2.934,1.0\n"
    )
    (offer,) = list(gcp_offers(raw))
    assert offer.instance_type == "a2-highgpu-1g" and offer.gpu_memory_gb == 40.0
    assert offer.on_demand_price is not None and 3.6 < offer.on_demand_price < 3.75
    assert offer.spot_price is not None and offer.spot_price > 1.0


def test_shipped_catalog_loads_with_sane_prices() -> None:
    catalog = default_catalog()
    assert default_catalog() is catalog  # cached
    assert len(catalog.offers) > 1500
    assert {o.cloud for o in catalog.offers} == {"aws", "gcp"}
    for o in catalog.offers:
        assert o.on_demand_price is not None or o.spot_price is not None
        if o.on_demand_price is not None and o.spot_price is not None:
            assert o.spot_price < o.on_demand_price
    assert len({o.key for o in catalog.offers}) == len(catalog.offers)


def test_find_offers_filters_and_sorts() -> None:
    catalog = default_catalog()
    found = find_offers(
        catalog, gpu_model="a100", min_gpu_memory_gb=40, gpu_count=8, capacity=CapacityType.SPOT
    )
    assert found
    assert all(o.gpu_model == "A100" and o.gpu_count == 8 for o in found)
    assert all(o.gpu_memory_gb is not None and o.gpu_memory_gb >= 40 for o in found)
    prices = [o.spot_price for o in found]
    assert prices == sorted(prices)  # type: ignore[type-var]
    regional = find_offers(catalog, region="us-west-2", cloud="aws", capacity="on_demand")
    assert regional and all(o.region == "us-west-2" and o.cloud == "aws" for o in regional)
    assert find_offers(catalog, gpu_model="no-such-gpu") == []
    assert all((o.gpu_memory_gb or 0) >= 80 for o in find_offers(catalog, min_gpu_memory_gb=80))


def _source(name: str) -> Path:
    here = Path(__file__).resolve()
    for root in (here.parents[3] / "shared", here.parents[4] / "shared", Path("/work/shared")):
        if (root / "data" / "gpu-prices" / name).exists():
            return root / "data" / "gpu-prices" / name
    pytest.skip("the reference data (shared/data) is not next to this checkout")


def test_shipped_aws_prices_are_the_source_prices_exactly() -> None:
    """The catalog once kept 6 significant digits: 138 AWS cells differed from the source."""
    cheapest: dict[str, float] = {}
    for row in csv.DictReader(_source("aws_gpu_vms.csv").open()):
        if not row["AcceleratorCount"] or not row["Price"]:
            continue
        count = int(float(row["AcceleratorCount"]))
        zone, instance, model = row["AvailabilityZone"], row["InstanceType"], row["AcceleratorName"]
        key = f"aws:{zone}:{instance}:{model}x{count}"
        price = float(row["Price"])
        cheapest[key] = min(price, cheapest.get(key, price))  # duplicate rows merge to the cheapest
    shipped = default_catalog().by_key()
    assert len(cheapest) > 500
    differ = [k for k, price in cheapest.items() if shipped[k].on_demand_price != price]
    assert differ == []
