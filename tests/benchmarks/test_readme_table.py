"""The benchmark figures in the README (a headline per row) and in docs/benchmarks.md (every
figure) are the results files' figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import figures as rows_module
from benchmarks import readme


def test_the_readme_table_is_rendered_from_the_results() -> None:
    current = readme.README.read_text()
    assert current == readme.render(current), "run `python -m benchmarks.readme`"
    for name in readme.ROWS:
        assert (readme.RESULTS / f"{name}.json").exists() or name in readme.NOT_YET, name


def test_the_docs_table_is_rendered_from_the_results() -> None:
    current = readme.DOCS.read_text()
    assert current == readme.render_docs(current), "run `python -m benchmarks.readme`"


def test_each_benchmark_has_a_row_in_both_tables() -> None:
    """A headline per full row, and a result not run yet says so in both."""
    assert readme.HEADLINES.keys() == readme.ROWS.keys()
    assert readme.NOT_YET_HEADLINES.keys() == readme.NOT_YET.keys()
    short, full = readme.short_table(), readme.table()
    assert short.count("\n") == full.count("\n")
    for name, row in readme.ROWS.items():
        title = (
            row(readme._load(name))[0] if name not in readme.NOT_YET else readme.NOT_YET[name][0]
        )
        assert f"| {title} |" in short and f"| {title} |" in full, name


def test_a_stale_table_fails_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--check` fails when either file's table differs from the results, and names it."""
    for name, path in (("README.md", readme.README), ("benchmarks.md", readme.DOCS)):
        copies = {p: tmp_path / p.name for p in readme.TARGETS}
        for original, copy in copies.items():
            copy.write_text(original.read_text())
        copies[path].write_text(copies[path].read_text().replace("| chaos |", "| chaos? |"))
        monkeypatch.setattr(readme, "TARGETS", {copies[p]: f for p, f in readme.TARGETS.items()})
        monkeypatch.setattr(readme, "ROOT", tmp_path)
        monkeypatch.setattr("sys.argv", ["readme", "--check"])
        assert readme.main() == 1, name
        monkeypatch.undo()


def _goal_results(tmp_path: Path, **figures: Any) -> None:
    """Results files with every goal met, but for the figures given."""
    f = {
        "vs_up": -0.0804,
        "interval": [-0.095, -0.081],
        "vs_greedy": -0.04,
        "never_above": True,
        "gap": 0.068,
        "misses": 0,
        "multi_gap": 0.102,
        "quote_error": 0.089,
        **figures,
    }
    standby = {
        "vs_uniform_progress": f["vs_up"],
        "vs_greedy": f["vs_greedy"],
        "never_above_uniform_progress": f["never_above"],
        "gap_to_omniscient": f["gap"],
        "deadline_misses": f["misses"],
    }
    policy = {
        "setting": {"start_ticks_per_trace": 12},
        "single_zone": {
            "summary": {
                "all": {
                    "ours_standby": standby,
                    "interval": {"ours_standby_vs_uniform_progress": f["interval"]},
                }
            }
        },
        "multi_zone": {
            "summary": {
                "all": {"ours_standby": {"gap_to_omniscient": f["multi_gap"], "deadline_misses": 0}}
            }
        },
    }
    (tmp_path / "spot_policy.json").write_text(json.dumps(policy))
    (tmp_path / "quote_calibration.json").write_text(
        json.dumps({"median_abs_error_typical": f["quote_error"]})
    )


def test_every_spot_goal_met_reads_met(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rows_module, "RESULTS", tmp_path)
    _goal_results(tmp_path)
    goals = readme.spot_goals()
    assert "NOT met" not in goals
    assert goals.count(": met") == 7
    assert "on average (8.04%; 8.1% to 9.5% with the traces drawn again): met" in goals
    assert "(12 start ticks per trace;" in goals


@pytest.mark.parametrize(
    ("figures", "missed"),
    [
        ({"vs_up": -0.0778}, "cheaper than Uniform Progress on average (7.8%;"),
        ({"vs_up": -0.0796}, "cheaper than Uniform Progress on average (7.96%;"),
        ({"vs_greedy": 0.002}, "cheaper than greedy (-0.2%)"),
        ({"never_above": False}, "never costlier than Uniform Progress in a cell"),
        ({"gap": 0.0804}, "within 8% of the omniscient optimum (8.04%)"),
        ({"misses": 1}, "0 deadlines missed (1)"),
        ({"multi_gap": 0.1249}, "multi-zone, within 12% of its optimum (12.5%)"),
        ({"quote_error": 0.1004}, "quote calibration, median error at most 0.10 (0.1004)"),
    ],
)
def test_a_spot_goal_missed_reads_not_met_at_a_figure_on_its_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: dict[str, Any], missed: str
) -> None:
    """Each goal is judged from its own figure, and the figure is shown with the decimals it
    takes not to round onto the goal (7.96% is not "8.0%: NOT met")."""
    monkeypatch.setattr(rows_module, "RESULTS", tmp_path)
    _goal_results(tmp_path, **figures)
    goals = readme.spot_goals()
    assert goals.count("NOT met") == 1, goals
    assert f"{missed}" in goals and goals.index("NOT met") > goals.index(missed), goals


def test_a_point_figure_over_the_goal_with_an_interval_below_it_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows_module, "RESULTS", tmp_path)
    _goal_results(tmp_path, interval=[-0.0935, -0.0693])
    goals = readme.spot_goals()
    assert (
        "(8.04%; 6.9% to 9.3% with the traces drawn again: met at the point figure, not beyond "
        "what the draw explains): met" in goals
    )


def test_without_spot_results_the_readme_has_no_goals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows_module, "RESULTS", tmp_path)
    assert readme.spot_goals() == ""
