"""The README's benchmark figures are the results files' figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import readme


def test_the_readme_table_is_rendered_from_the_results() -> None:
    current = readme.README.read_text()
    assert current == readme.render(current), "run `python -m benchmarks.readme`"
    for name in readme.ROWS:
        assert (readme.RESULTS / f"{name}.json").exists() or name in readme.NOT_YET, name


def _goal_results(tmp_path: Path, *, vs_up: float, misses: int) -> None:
    standby = {
        "vs_uniform_progress": vs_up,
        "vs_greedy": -0.04,
        "never_above_uniform_progress": True,
        "gap_to_omniscient": 0.076,
        "deadline_misses": misses,
    }
    policy = {
        "setting": {"start_ticks_per_trace": 12},
        "single_zone": {
            "summary": {
                "all": {
                    "ours_standby": standby,
                    "interval": {"ours_standby_vs_uniform_progress": [-0.095, -0.061]},
                }
            }
        },
        "multi_zone": {
            "summary": {"all": {"ours_standby": {"gap_to_omniscient": 0.099, "deadline_misses": 0}}}
        },
    }
    (tmp_path / "spot_policy.json").write_text(json.dumps(policy))
    (tmp_path / "quote_calibration.json").write_text(
        json.dumps({"median_abs_error_typical": 0.089})
    )


def test_each_spot_goal_is_judged_from_its_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readme, "RESULTS", tmp_path)
    _goal_results(tmp_path, vs_up=-0.0778, misses=0)
    short = readme.spot_goals()
    assert "at least 8% cheaper than Uniform Progress on average (7.8%, 6.1% to 9.5%" in short
    assert "(7.8%, 6.1% to 9.5% with the traces drawn again): NOT met" in short
    assert "within 8% of the omniscient optimum (7.6%): met" in short
    assert "multi-zone, within 12% of its optimum (9.9%): met" in short
    assert "quote calibration, median error at most 0.10 (0.09): met" in short
    assert "(12 start ticks per trace)" in short

    _goal_results(tmp_path, vs_up=-0.0804, misses=1)
    met = readme.spot_goals()
    assert "(8.0%, 6.1% to 9.5% with the traces drawn again): met" in met
    assert "0 deadlines missed (1): NOT met" in met


def test_without_spot_results_the_readme_has_no_goals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readme, "RESULTS", tmp_path)
    assert readme.spot_goals() == ""
