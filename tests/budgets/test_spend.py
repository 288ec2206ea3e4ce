"""Spend this month by the ledger's rules, as pure arithmetic (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from api.budgets.spend import Charge, spent_microusd
from api.money import month_start

NOW = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
START = month_start(NOW)


def test_month_start_is_the_first_instant_of_the_utc_month() -> None:
    assert datetime(2025, 3, 1, tzinfo=UTC) == START


def test_ended_attempts_count_their_recorded_cost_and_running_ones_accrue_to_now() -> None:
    ended = Charge(2.0, NOW - timedelta(hours=5), NOW - timedelta(hours=3), 4_100_000)
    running = Charge(1.5, NOW - timedelta(hours=2), None, None)
    assert spent_microusd([ended], start=START, now=NOW) == 4_100_000
    assert spent_microusd([running], start=START, now=NOW) == 3_000_000
    assert spent_microusd([ended, running], start=START, now=NOW) == 7_100_000


def test_an_attempt_across_the_month_start_counts_only_this_months_share() -> None:
    # 10 hours, 4 of them last month: 6/10 of the recorded $10 is this month's
    ended = Charge(1.0, START - timedelta(hours=4), START + timedelta(hours=6), 10_000_000)
    assert spent_microusd([ended], start=START, now=NOW) == 6_000_000
    running = Charge(2.0, START - timedelta(hours=1), None, None)
    hours = (NOW - START).total_seconds() / 3600
    assert spent_microusd([running], start=START, now=NOW) == round(2.0 * hours * 1_000_000)


def test_a_closed_attempt_without_a_recorded_cost_is_priced_by_the_hour() -> None:
    closed = Charge(3.0, NOW - timedelta(hours=2), NOW - timedelta(hours=1), None)
    assert spent_microusd([closed], start=START, now=NOW) == 3_000_000
