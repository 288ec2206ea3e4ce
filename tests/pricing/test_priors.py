"""The shipped spot priors: rebuilt from the traces, hierarchical, the gang fit, and each pool's
burstiness (which the quote's availability model needs), as placement uses them."""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from api.placement.options import Market
from api.placement.snapshot import JobState, Snapshot
from api.pricing import build_priors
from api.pricing.catalog import default_catalog
from api.pricing.preemption import (
    LEVELS,
    PRIORS_FILE,
    PreemptionPrior,
    Priors,
    default_priors,
    gang_rate,
    parse_priors,
    posterior,
)
from gpujobs.spec import JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _data() -> Path:
    here = Path(__file__).resolve()
    for root in (here.parents[3] / "shared", here.parents[4] / "shared", Path("/work/shared")):
        if (root / "data" / "spot-traces").is_dir():
            return root / "data"
    pytest.skip("the reference data (shared/data) is not next to this checkout")


def test_the_shipped_priors_are_what_build_priors_makes_of_the_traces() -> None:
    assert build_priors.build(_data()) == json.loads(PRIORS_FILE.read_text())


def test_far_fewer_spot_offers_fall_back_to_the_pooled_default() -> None:
    """Measured: 1,861 of 1,873 spot offers used the pooled default (only zone names and
    region x instance type were matched, and AWS catalog zones are zone ids)."""
    priors = default_priors()
    offers = [o for o in default_catalog().offers if o.spot_price is not None]
    flat = Priors(priors.by_zone, priors.by_region, priors.default)  # the two levels of before
    level = Counter(
        priors.level(zone=o.zone, region=o.region, instance_type=o.instance_type, cloud=o.cloud)[0]
        for o in offers
    )
    before = sum(
        flat.level(zone=o.zone, region=o.region, instance_type=o.instance_type)[0] == "default"
        for o in offers
    )
    assert before >= len(offers) - 15
    assert set(level) <= set(LEVELS)
    assert level["default"] < before - 400
    # What stays on the default is what no trace speaks for: GCP (its traces are CPU machines)
    # and AWS regions and instance families the traces never ran.
    traced_regions = {region for _, region in priors.by_cloud_region}
    for o in offers:
        name, _ = priors.level(
            zone=o.zone, region=o.region, instance_type=o.instance_type, cloud=o.cloud
        )
        informed = o.cloud == "aws" and (
            o.region in traced_regions or o.instance_type.split(".")[0] in {"p2", "p3"}
        )
        assert (name != "default") == informed, o.key


def test_zone_ids_match_the_traces_zone_names_where_aws_maps_them_uniformly() -> None:
    """us-east-2 maps names to ids the same in every account; us-east-1 and us-west-2 do not."""
    priors = default_priors()
    traced = priors.by_zone[("us-east-2a", "p3.2xlarge")]
    level, found = priors.level(
        zone="use2-az1", region="us-east-2", instance_type="p3.2xlarge", cloud="aws"
    )
    assert level == "zone" and found == traced
    level, _ = priors.level(
        zone="use2-az1", region="us-east-2", instance_type="g5.xlarge", cloud="aws"
    )
    assert level == "cloud_zone"  # the zone's record, any GPU type
    level, _ = priors.level(
        zone="use1-az4", region="us-east-1", instance_type="p3.2xlarge", cloud="aws"
    )
    assert level == "region"  # the account's names -> ids are unknown: the region's mean
    # Unseen pools lean on their group's mean, weakly: a few hours of the service's own runs
    # move them (the traced zone keeps its own longer record).
    assert priors.by_region[("us-east-1", "p3.2xlarge")].beta < 12.0
    assert priors.by_zone[("us-east-2a", "p3.2xlarge")].beta == pytest.approx(48.0)


def test_a_gang_is_preempted_far_less_than_independent_nodes_would_be() -> None:
    """The 4- and 16-node traces: a full gang loses a node at about one node's rate, not n times
    it; the fitted exponent reproduces that and placement uses it."""
    fit = build_priors.gang_fit(_data())
    traces = fit["traces"]
    assert isinstance(traces, list) and {t["nodes"] for t in traces} == {4, 16}
    for t in traces:
        assert t["gang_rate"] < 0.6 * t["independent_rate"]
    exponent = default_priors().gang_exponent
    assert exponent == fit["exponent"] and 0.0 <= exponent < 0.5
    gangs = sum(t["gang_preemptions"] for t in traces)
    predicted = sum(t["node_rate"] * t["full_hours"] * t["nodes"] ** exponent for t in traces)
    independent = sum(t["node_rate"] * t["full_hours"] * t["nodes"] for t in traces)
    assert abs(predicted - gangs) < 0.1 * gangs < independent - gangs

    spec = JobSpec.model_validate(
        {
            "name": "gang",
            "trainer": {"steps": 1000},
            "resources": {"gpu_models": ["V100"], "gpus_per_node": 1, "nodes": 16},
            "capacity": {"types": ["spot"]},
            "estimated_hours": 10,
        }
    )
    job = JobState("g", "t", spec, NOW, None, 10.0)
    market = Market(Snapshot(now=NOW, jobs=[job], offers=default_catalog().offers))
    considered = list(market.spot(job))
    assert considered
    for c in considered:
        one = market.index.prior(c.option.offer).rate
        assert c.option.risk.preemption_rate == pytest.approx(gang_rate(one, 16, exponent))
        assert math.isfinite(c.option.lifetime_hours)


def test_outages_seen_move_the_wait_for_spot_and_availability() -> None:
    prior = PreemptionPrior(2.0, 8.0, mtta_hours=2.0, availability=0.5)
    # Out for 6 h and not back yet: as many pseudo-outages as pseudo-preemptions (2).
    waiting = posterior(prior, preemptions=0, spot_hours=0.0, outage_hours=6.0)
    assert waiting.mtta_hours == pytest.approx((2 * 2.0 + 6.0) / 2)
    assert waiting.availability == pytest.approx(4.0 / (4.0 + 5.0))
    assert waiting.rate == prior.rate
    # Three short outages that ended: spot comes back sooner than the prior says.
    quick = posterior(prior, preemptions=3, spot_hours=4.0, outage_hours=0.6, recoveries=3)
    assert quick.mtta_hours == pytest.approx((4.0 + 0.6) / 5) and quick.mtta_hours < 2.0
    assert quick.rate == pytest.approx(5 / 12)
    assert posterior(prior, preemptions=0, spot_hours=0.0) == prior
    with pytest.raises(ValueError):
        posterior(prior, preemptions=0, spot_hours=0.0, outage_hours=-1.0)


def test_priors_carry_the_variation_of_complete_run_lengths(tmp_path: Path) -> None:
    folder = tmp_path / "spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
    folder.mkdir(parents=True)
    # Complete runs (the first and last are cut by the trace's ends): up 3, 1; down 1, 1, 2.
    data = [1, 0, 1, 1, 1, 0, 1, 0, 0, 1]
    (folder / "us-east-1a_v100_1.json").write_text(
        json.dumps({"metadata": {"gap_seconds": 3600}, "data": data})
    )
    priors = parse_priors(json.loads(json.dumps(build_priors.build(tmp_path))))
    prior = priors.lookup(zone="us-east-1a", region="us-east-1", instance_type="p3.2xlarge")
    assert prior.up_cv == pytest.approx(0.5, abs=1e-4)  # mean 2, sd 1
    assert prior.down_cv == pytest.approx((6 / 27) ** 0.5 / (4 / 3), abs=1e-4)


def test_priors_without_run_shapes_are_memoryless() -> None:
    raw = {"default": {"alpha": 1.0, "beta": 4.0, "mtta_hours": 1.0, "availability": 0.8}}
    assert (parse_priors(raw).default.up_cv, parse_priors(raw).default.down_cv) == (1.0, 1.0)
