"""The spot benchmark's interval: how much its headline ratio owes to which traces were recorded."""

from __future__ import annotations

from benchmarks.spot.experiment import resampled_interval


def _row(
    set_name: str, unit: str, ours: list[float], up: list[float], setting: str = "paper"
) -> dict[str, object]:
    return {
        "set": set_name,
        "unit": unit,
        "setting": setting,
        "fraction": 0.6,
        "results": {"ours_standby": {"cost": ours}, "uniform_progress": {"cost": up}},
    }


def test_a_policy_cheaper_by_the_same_share_on_every_trace_has_no_spread() -> None:
    rows = [
        _row(s, f"{s}-{t}", [0.9 * c for c in costs], costs, setting)
        for s in ("a", "b")
        for t, costs in enumerate(([1.0, 0.8], [0.5, 0.7, 0.6]))
        for setting in ("paper", "spot_half_price")
    ]
    low, high = resampled_interval(rows, "ours_standby") or (0.0, 0.0)
    assert round(low, 9) == round(high, 9) == -0.1


def test_the_interval_spans_what_a_draw_of_the_traces_could_have_shown() -> None:
    """Two traces: on one ours halves the cost, on the other it saves nothing. Drawn with
    replacement, the set could have held the first twice (-50%) or the second twice (0%)."""
    rows = [_row("a", "good", [0.5, 0.5], [1.0, 1.0]), _row("a", "flat", [1.0], [1.0])]
    assert resampled_interval(rows, "ours_standby") == [-0.5, 0.0]


def test_a_trace_is_the_sample_not_its_jobs() -> None:
    """Many starts on one trace narrow nothing: the trace keeps its jobs in every draw."""
    few = [_row("a", "good", [0.5], [1.0]), _row("a", "flat", [1.0], [1.0])]
    many = [_row("a", "good", [0.5] * 50, [1.0] * 50), _row("a", "flat", [1.0] * 50, [1.0] * 50)]
    assert resampled_interval(few, "ours_standby") == resampled_interval(many, "ours_standby")


def test_no_interval_where_a_set_has_one_trace() -> None:
    rows = [_row("a", "x", [0.5], [1.0]), _row("b", "y", [0.5], [1.0]), _row("b", "z", [1], [1])]
    assert resampled_interval(rows, "ours_standby") is None
