"""The chaos benchmark's invariants, exercised: a small run on the real stack, and its checks
fed observations that break each invariant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.chaos import FAULTS, check, coverage, run_chaos
from benchmarks.process_groups import GroupSeen
from devstack.s3server import S3Server

T0 = "2026-12-02T10:00:00+00:00"
T1 = "2026-12-02T10:01:00+00:00"
T2 = "2026-12-02T10:02:00+00:00"


def _attempt(
    attempt_id: str, started: str, ended: str | None, cost: float | None
) -> dict[str, Any]:
    return {"id": attempt_id, "started_at": started, "ended_at": ended, "cost": cost,
            "price_per_hour": 3.6, "capacity_type": "spot", "end_reason": None}  # fmt: skip


def _check(**overrides: Any) -> dict[str, Any]:
    observations: dict[str, Any] = {
        "submitted": ["j"],
        "jobs": {"j": {"status": "SUCCEEDED", "status_reason": None}},
        "attempts": {"j": [_attempt("a1", T0, T1, 0.06), _attempt("a2", T1, T2, 0.06)]},
        "events": {"j": []},
        "seen": {},
        "sampled_overlaps": [],
        "alive_at_end": [],
        "ledger_total_microusd": 120_000,
        "weights_equal": {"j": True},
        "ended_at": 1e12,
    }
    observations.update(overrides)
    violations: dict[str, Any] = check(**observations)["violations"]
    return violations


def test_the_checks_find_each_kind_of_violation() -> None:
    assert not any(_check().values())
    assert _check(jobs={"j": {"status": "RUNNING"}})["lost_jobs"] == 1
    assert (
        _check(jobs={"j": {"status": "FAILED", "status_reason": None}})["ended_without_reason"] == 1
    )
    overlapping = [_attempt("a1", T0, T2, 0.12), _attempt("a2", T1, T2, 0.06)]
    assert (
        _check(attempts={"j": overlapping}, ledger_total_microusd=180_000)[
            "jobs_with_duplicate_attempts"
        ]
        == 1
    )
    # Closed at T1 but its processes were seen 30 s later: 30 unbilled seconds.
    late = GroupSeen("j", first=_ts(T0), last=_ts(T1) + 30)
    assert _check(seen={"a1": late})["unbilled_seconds"] == pytest.approx(30, abs=0.01)
    underbilled = [_attempt("a1", T0, T1, 0.03), _attempt("a2", T1, T2, 0.06)]
    assert _check(attempts={"j": underbilled}, ledger_total_microusd=90_000)[
        "unbilled_seconds"
    ] == pytest.approx(30, abs=0.01)
    assert _check(ledger_total_microusd=119_000)["ledger_mismatch"] == 1
    assert _check(weights_equal={"j": False})["weights_mismatch"] == 1


def test_coverage_names_what_a_run_did_not_exercise() -> None:
    ran = {"j": [{"end_reason": "preempted"}, {"end_reason": "succeeded"}]}
    full = coverage([{"fault": kind} for kind in FAULTS], FAULTS, ran)
    assert full == {"fault_kinds_missing": [], "preempted_attempts": 1, "complete": True}
    short = coverage([{"fault": "kill_api"}], FAULTS, {"j": [{"end_reason": "succeeded"}]})
    assert short["fault_kinds_missing"] == [k for k in FAULTS if k != "kill_api"]
    assert short["preempted_attempts"] == 0 and not short["complete"]


def _ts(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value).timestamp()


@pytest.mark.e2e
@pytest.mark.timeout(420)
def test_a_worker_killed_mid_run_loses_duplicates_and_leaves_unbilled_nothing(
    tmp_path: Path, s3_server: S3Server
) -> None:
    report = run_chaos(
        tmp=tmp_path,
        jobs=2,
        steps=40,
        checkpoint_every=10,
        seed=3,
        faults=("kill_worker",),
        max_faults=1,
        timeout_s=240,
        s3=s3_server,
    )
    assert [f["fault"] for f in report["faults"]] == ["kill_worker"]
    assert report["weights_checked"] == report["succeeded"]
    assert report["violations"] == {
        "lost_jobs": 0,
        "ended_without_reason": 0,
        "jobs_with_duplicate_attempts": 0,
        "unbilled_seconds": 0,
        "unbilled_attempts": 0,
        "ledger_mismatch": 0,
        "weights_mismatch": 0,
    }, report["details"]
