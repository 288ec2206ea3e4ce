"""The simulated spot market a clone can run without the reference data set."""

from __future__ import annotations

import json
from pathlib import Path

from api.settings import Settings
from worker.control import DEFAULT_TRACE, make_market
from worker.launchers.spot_market import TraceMarket


def test_the_trace_market_replays_the_shipped_trace_by_default(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, spot_market="trace", spot_trace_time_scale=195.0)
    market = make_market(settings)
    assert isinstance(market, TraceMarket)
    raw = json.loads(DEFAULT_TRACE.read_text())
    assert market.data == [int(v) for v in raw["data"]]
    assert market.tick_s == raw["metadata"]["gap_seconds"] / 195.0  # one tick per second
    expected = [v > 0 for v in raw["data"][:50]]
    assert [market.available(market.t0 + i + 0.5) for i in range(50)] == expected
    assert 0 < sum(v > 0 for v in raw["data"]) < len(raw["data"])  # it does go away at times
