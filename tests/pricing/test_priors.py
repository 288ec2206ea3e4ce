"""Priors carry each pool's burstiness, which the quote's availability model needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.pricing.build_priors import build
from api.pricing.preemption import parse_priors


def test_priors_carry_the_variation_of_complete_run_lengths(tmp_path: Path) -> None:
    folder = tmp_path / "spot-traces" / "availability"
    folder.mkdir(parents=True)
    # Complete runs (the first and last are cut by the trace's ends): up 3, 1; down 1, 1, 2.
    data = [1, 0, 1, 1, 1, 0, 1, 0, 0, 1]
    (folder / "us-east-1a_v100_1.json").write_text(
        json.dumps({"metadata": {"gap_seconds": 3600}, "data": data})
    )
    priors = parse_priors(json.loads(json.dumps(build(tmp_path))))
    prior = priors.lookup(zone="us-east-1a", region="us-east-1", instance_type="p3.2xlarge")
    assert prior.up_cv == pytest.approx(0.5, abs=1e-4)  # mean 2, sd 1
    assert prior.down_cv == pytest.approx((6 / 27) ** 0.5 / (4 / 3), abs=1e-4)


def test_priors_without_run_shapes_are_memoryless() -> None:
    raw = {"default": {"alpha": 1.0, "beta": 4.0, "mtta_hours": 1.0, "availability": 0.8}}
    assert (parse_priors(raw).default.up_cv, parse_priors(raw).default.down_cv) == (1.0, 1.0)
