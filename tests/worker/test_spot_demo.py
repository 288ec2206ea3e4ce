"""The spot demo sized from the trainer's measured rate (devstack/spot_demo.py, `make spot-demo`):
preempted once in the replay's first run of spot, finished in the run after, on a slow machine,
a loaded one and a fast one alike."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from api.settings import Settings
from devstack.spot_demo import (
    EXAMPLE,
    LATE_S,
    RESTART_S,
    Stretch,
    demo_steps,
    shipped_stretch,
    sized_spec,
    stretch_at,
    training_s,
)
from gpujobs.spec import JobSpec


def test_the_shipped_stretch_is_read_from_the_trace_at_the_markets_scale(tmp_path: Path) -> None:
    # 195 s ticks at x60: 16 ticks of spot, 3 without, 49 with (spot_market.SHIPPED_TRACE_START)
    assert shipped_stretch(Settings(home=tmp_path)) == Stretch(52.0, 9.75, 159.25)
    slower = shipped_stretch(Settings(home=tmp_path, spot_trace_time_scale=30.0))
    assert slower == Stretch(104.0, 19.5, 318.5)


def test_a_stretch_is_spot_then_none_then_spot_again_wrapping_round_the_trace() -> None:
    assert stretch_at([0, 1, 1, 0, 0, 1, 1, 1, 0], start=1, tick_s=2.0) == Stretch(4.0, 4.0, 6.0)
    assert stretch_at([1, 0, 0, 1, 1], start=3, tick_s=1.0) == Stretch(3.0, 2.0, 3.0)
    with pytest.raises(ValueError, match="not spot, then none, then spot again"):
        stretch_at([0, 1, 1], start=0, tick_s=1.0)
    with pytest.raises(ValueError, match="not spot, then none, then spot again"):
        stretch_at([1, 1, 1], start=0, tick_s=1.0)


@pytest.mark.parametrize("rate", [2.0, 8.0, 200.0])
def test_the_demo_job_is_preempted_once_and_finishes_in_the_stretch_after(rate: float) -> None:
    stretch = Stretch(up_s=52.0, out_s=9.75, back_s=159.25)
    steps = demo_steps(rate, stretch)
    seconds = steps / rate
    # Training from the replay's first second, it is still training when spot is taken back.
    assert seconds > stretch.up_s
    # Begun half a minute in, what is left after the preemption fits once it has restarted.
    left = seconds - (stretch.up_s - LATE_S)
    assert left <= stretch.back_s - RESTART_S
    # The rate measured here off by half again either way once the service runs beside the
    # trainer, or other work is gone: the job still does both.
    for actual in (rate / 1.5, rate * 1.5):
        assert steps / actual > stretch.up_s
        assert steps / actual - (stretch.up_s - LATE_S) <= stretch.back_s - RESTART_S
    # And all of it within a few minutes of `make run`.
    assert stretch.up_s + stretch.out_s + RESTART_S + left < 4 * 60


def test_the_sizes_follow_the_rate() -> None:
    stretch = Stretch(up_s=52.0, out_s=9.75, back_s=159.25)
    assert [demo_steps(rate, stretch) for rate in (2.0, 8.0, 200.0)] == [174, 696, 17382]
    # first-run's 6,000 steps are over 10 minutes at 8 steps a second: the demo's are 87 s
    assert training_s(stretch) == pytest.approx(86.9, abs=0.1)


def test_a_stretch_too_short_to_finish_after_a_restart_or_no_rate_is_refused() -> None:
    with pytest.raises(ValueError, match="spot comes back for 40 s: too short"):
        demo_steps(8.0, Stretch(up_s=52.0, out_s=10.0, back_s=40.0))
    for rate in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="a measured rate"):
            demo_steps(rate, Stretch(up_s=52.0, out_s=10.0, back_s=160.0))


def test_the_sized_spec_is_the_first_run_example_with_its_steps_and_estimate() -> None:
    example = yaml.safe_load(EXAMPLE.read_text())
    spec = JobSpec.model_validate(sized_spec(example, steps=696, seconds=86.9))
    assert spec.name == "spot-demo"
    assert spec.trainer.steps == 696
    assert spec.trainer.checkpoint.every_steps == 69  # ten checkpoints
    assert spec.trainer.checkpoint.keep_last == example["trainer"]["checkpoint"]["keep_last"]
    assert spec.estimated_hours == 0.024
    assert spec.trainer.args == example["trainer"]["args"]  # the same model as the first run
