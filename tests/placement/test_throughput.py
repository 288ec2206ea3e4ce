"""A team's trainer's measured rate per GPU model replaces the table's figures for its jobs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from api.placement.throughput import job_speeds, learned_speeds, several_models, throughput_key
from gpujobs.spec import JobSpec

TABLE = {"a100": 1.0, "h100": 2.0, "l4": 0.25}


def spec(**trainer: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "t", "trainer": {"steps": 100, **trainer}, "estimated_hours": 1}
    )


def test_measured_models_take_their_rate_and_the_rest_keep_the_tables_place() -> None:
    speeds = job_speeds(TABLE, {"a100": 100.0, "h100": 130.0})
    assert speeds["h100"] / speeds["a100"] == pytest.approx(1.3)
    # The L4, not measured, keeps its table figure against the measured models' middle: the
    # A100 measured sqrt(100 / 65) times its table place relative to the H100.
    assert speeds["l4"] / speeds["a100"] == pytest.approx(0.25 * math.sqrt(65 / 100))
    assert job_speeds(TABLE, {}) == TABLE
    assert job_speeds(TABLE, {"a100": 100.0}) == TABLE  # one model alone compares to nothing
    assert job_speeds(TABLE, {"mi300x": 50.0, "l4": 0.0, "a100": 9.0}) == TABLE


def test_a_trainer_reporting_absurd_rates_moves_a_model_at_most_four_times() -> None:
    """A rate of 1e308 on an L4 once made every speed infinite and every pace NaN: decide()
    raised on the whole pass, for every team."""
    speeds = job_speeds(TABLE, {"a100": 100.0, "l4": 1e308})
    assert all(math.isfinite(s) and s > 0 for s in speeds.values())
    assert speeds["l4"] / speeds["a100"] == pytest.approx(0.25 * 16)
    # Every model alike (the local launcher): the names' rates differ only by noise.
    assert job_speeds({}, {"a100": 100.0, "h100": 130.0}) == {}


def test_the_key_is_what_sets_the_rate() -> None:
    base = throughput_key(spec())
    assert throughput_key(spec(steps=5000, learning_rate=0.1, seed=3)) == base
    assert throughput_key(spec(checkpoint={"every_steps": 10})) == base
    assert throughput_key(spec(amp="off")) != base
    assert throughput_key(spec(batch_size=32)) != base
    assert throughput_key(spec(args={"n_layer": 12})) != base


def test_speeds_matter_only_between_several_models() -> None:
    assert several_models(None) and several_models(["A100", "H100"])
    assert not several_models(["A100"])


def test_measures_that_change_nothing_leave_the_job_on_the_tables_ranking() -> None:
    """A job whose trainer ran on one model only gets no speeds of its own, so the scheduler
    does not rank its candidates anew on every pass for the same order."""
    assert learned_speeds(TABLE, {"a100": 100.0}) is None
    assert learned_speeds({}, {"a100": 100.0, "h100": 130.0}) is None
    assert learned_speeds(TABLE, {"a100": 100.0, "h100": 130.0}) == job_speeds(
        TABLE, {"a100": 100.0, "h100": 130.0}
    )
