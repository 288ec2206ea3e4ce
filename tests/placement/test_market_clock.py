"""The spot market's durations in words: on the simulated market's clock (the local launcher's,
docs/spot-demo.md) a reason says so and what they take here; on a real one, the hours alone."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from api.placement import Current, Standby, Withdraw, decide
from api.placement.market_clock import market_duration
from api.pricing.preemption import PreemptionPrior
from api.settings import Settings
from gpujobs.spec import CapacityType
from tests.placement.test_policy import NOW, OFFERS, snap
from tests.placement.test_standby import on_demand


def test_on_a_real_clock_a_duration_is_the_hours_alone() -> None:
    assert market_duration(1.2) == "1.2 h"
    assert market_duration(0.5) == "30 min"
    assert market_duration(0.01) == "36 s"  # the local launcher's changeover
    assert market_duration(math.inf) == "unbounded"


def test_on_a_simulated_clock_a_duration_says_so_and_what_it_takes_here() -> None:
    assert market_duration(1.2, time_scale=60.0) == "1.2 h simulated (72 s here)"
    assert market_duration(6.8, time_scale=60.0) == "6.8 h simulated (7 min here)"
    assert market_duration(0.5, time_scale=195.0) == "30 min simulated (9 s here)"
    assert market_duration(math.inf, time_scale=60.0) == "unbounded"  # no clock to convert


def test_a_standby_reason_gives_the_spot_run_on_the_markets_clock() -> None:
    tight = on_demand(9.0, deadline=9.3)
    (real,) = decide(snap([tight], standby=True))
    (simulated,) = decide(snap([tight], standby=True, time_scale=60.0))
    assert isinstance(real, Standby) and isinstance(simulated, Standby)
    assert "simulated" not in real.reason, real.reason
    assert "expected spot run " in simulated.reason
    run = simulated.reason.split("expected spot run ")[1].split(" against")[0]
    assert run == "1.6 h simulated (98 s here)", simulated.reason
    # The changeover is the launcher's own, on the wall clock whatever the market's.
    assert "changeover of 12 min, hidden" in simulated.reason, simulated.reason
    # The same decision: only the words follow the clock.
    assert simulated.to == real.to


def test_a_withdrawn_standby_and_an_unusable_pool_say_the_simulated_clock() -> None:
    """A pool whose learned lifetime is 1.2 min of the market: at x60, over in a second or two."""
    other = next(o for o in OFFERS if o.spot_price and o.zone != "us-east-1b")
    poor = PreemptionPrior(alpha=50.0, beta=1.0, mtta_hours=1.0, availability=0.5)
    rates = {(other.zone, other.instance_type): poor}
    held = Current(other.key, CapacityType.SPOT, NOW - timedelta(minutes=1), attempt_id="s-1")
    job = replace(on_demand(), standby=held)
    (d,) = decide(snap([job], standby=True, rates=rates, time_scale=60.0))
    assert isinstance(d, Withdraw) and d.reason.startswith("it no longer pays for itself")
    assert "expected spot run 72 s simulated (1 s here)" in d.reason, d.reason


def test_the_settings_give_the_simulated_markets_clock_only_where_it_runs(tmp_path: Path) -> None:
    assert Settings(home=tmp_path).market_time_scale() == 1.0  # no simulated market
    assert Settings(home=tmp_path, spot_market="trace").market_time_scale() == 60.0
    rate = Settings(home=tmp_path, spot_market="rate", spot_trace_time_scale=120.0)
    assert rate.market_time_scale() == 120.0
    real = Settings(home=tmp_path, launcher="kubernetes", spot_market="trace")
    assert real.market_time_scale() == 1.0  # a cluster's spot is the cloud's, on its clock
