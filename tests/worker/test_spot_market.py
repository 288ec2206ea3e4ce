"""The simulated spot market a clone can run without the reference data set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.settings import Settings
from worker.launchers.local.configure import market_from_settings as make_market
from worker.launchers.local.spot_market import DEFAULT_TRACE, TraceMarket


def test_the_trace_market_replays_the_shipped_trace_by_default(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path, spot_market="trace", spot_trace_time_scale=195.0, spot_trace_start=0
    )
    market = make_market(settings)
    assert isinstance(market, TraceMarket)
    raw = json.loads(DEFAULT_TRACE.read_text())
    assert market.data == [int(v) for v in raw["data"]]
    assert market.tick_s == raw["metadata"]["gap_seconds"] / 195.0  # one tick per second
    expected = [v > 0 for v in raw["data"][:50]]
    assert [market.available(market.t0 + i + 0.5) for i in range(50)] == expected
    assert 0 < sum(v > 0 for v in raw["data"]) < len(raw["data"])  # it does go away at times


def test_the_readme_demo_sees_a_preemption_within_a_minute_and_spot_back_soon(
    tmp_path: Path,
) -> None:
    """`GPUJOBS_SPOT_MARKET=trace make run` as docs/spot-demo.md says (x60): spot is there when the
    service starts, a job started in its first half minute is taken back within a minute, and
    spot returns within a quarter of a minute for long enough to finish the first run (~1 min)."""
    market = make_market(Settings(home=tmp_path, spot_market="trace"))
    assert isinstance(market, TraceMarket)
    t0 = market.t0
    assert all(market.available(t0 + s) for s in range(0, 31))
    taken = market.preemption_time(now=t0 + 30.0, attempt_id="a1")
    assert taken is not None and taken - t0 <= 60.0
    back = next(
        t0 + s / 4 for s in range(int((taken - t0) * 4), 4 * 600) if market.available(t0 + s / 4)
    )
    assert back - taken <= 15.0
    lasts = market.preemption_time(now=back, attempt_id="a2")
    assert lasts is None or lasts - back >= 90.0


def test_the_replay_start_is_a_setting_and_checked_against_the_trace(tmp_path: Path) -> None:
    raw = json.loads(DEFAULT_TRACE.read_text())
    start = 246  # the shipped trace's first tick with spot
    market = make_market(
        Settings(
            home=tmp_path, spot_market="trace", spot_trace_time_scale=195.0, spot_trace_start=start
        )
    )
    assert isinstance(market, TraceMarket)
    expected = [v > 0 for v in raw["data"][start : start + 20]]
    assert [market.available(market.t0 + i + 0.5) for i in range(20)] == expected
    # the first tick without spot after it: 3 ticks (seconds at this scale) in
    assert market.preemption_time(now=market.t0 + 0.5, attempt_id="a") == market.t0 + 3.0
    with pytest.raises(ValueError, match="spot_trace_start 20158 is outside the trace's 20158"):
        make_market(Settings(home=tmp_path, spot_market="trace", spot_trace_start=len(raw["data"])))
