"""Chaos on the real stack: nothing lost, nothing run twice, nothing unbilled, same weights.

    python -m benchmarks.chaos [--jobs 4] [--steps 200] [--seed 11] [--timeout-s 480]

The whole service as processes (devstack.stack: a throwaway PostgreSQL cluster, a dedicated
Redis, SeaweedFS, the API over uvicorn, a Celery worker and beat, the local launcher with its
simulated spot market replaying a seeded availability trace). N tiny-GPT jobs (spot or on-demand,
a checkpoint every few steps) are submitted; then, at seeded random moments until they all end,
one of: SIGKILL the worker (restarted), SIGKILL the API (restarted), restart Redis, crash and
restart PostgreSQL (`pg_ctl -m immediate`). The first four faults are one of each, so every kind
happens in every run.

A sampler reads /proc every 0.2 s and records, for each attempt's process group (the launcher's
`pid` file), when it was seen alive. Checked at the end (`check`):
- every job SUCCEEDED, or ended with a stated reason (`status_reason` or its last event's);
- lost: jobs that did not reach an end state within the timeout, or that the API no longer knows;
- duplicate attempts: jobs with two attempts' process groups alive in the same sample, or two
  attempts whose [started_at, ended_at] intervals overlap;
- unbilled seconds: attempts left open after their job ended, closed without a cost, closed with
  a cost below price x run time, or whose processes were seen alive after `ended_at` (beyond
  the sampling tolerance) or are alive at the end;
- the ledger (`GET /v1/usage` total) against the sum of the attempts' costs;
- every SUCCEEDED job's final checkpoint against one uninterrupted run of the same config, with
  the trainer in this process: each model tensor `torch.equal`.
Writes benchmarks/results/chaos.json and prints the same summary. Violations are findings: the
JSON records their counts and details, and the exit status is 1 when there are any.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from benchmarks.process_groups import GroupSeen, Sampler
from devstack.confinement import open_directory
from devstack.postgres import PostgresCluster
from devstack.s3server import S3Server, start_s3_server
from devstack.stack import Stack
from devstack.workloads import TINY_GPT
from gpujobs.usage import MICRO

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FAULTS = ("kill_worker", "kill_api", "restart_redis", "restart_postgres")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
# A group seen alive up to this long after its attempt's ended_at is the sampler's and the
# reconciler's granularity (the supervisor writes the exit code, then exits), not unbilled work.
ALIVE_AFTER_END_TOLERANCE_S = 1.5


def trainer_spec(*, steps: int, checkpoint_every: int) -> dict[str, Any]:
    return {
        "workload": "gpt",
        "steps": steps,
        "batch_size": 8,
        "amp": "bf16",
        "seed": 7,
        "dataloader": {"num_workers": 0},
        "checkpoint": {"every_steps": checkpoint_every},
        "args": TINY_GPT,
    }


def spot_trace(rng: random.Random, *, gaps: int = 2, ticks: int = 400) -> list[int]:
    """Spot available for seeded windows of 36-72 s, then gone for one tick (a preemption),
    `gaps` times; then available for good, so every job can finish."""
    trace: list[int] = []
    for _ in range(gaps):
        trace += [1] * rng.randint(6, 12) + [0]
    return trace + [1] * (ticks - len(trace))


# The checks (pure: observations in, counts and details out) -----------------------------------


def _ts(value: str | None) -> float | None:
    return None if value is None else datetime.fromisoformat(value).timestamp()


def check(
    *,
    submitted: list[str],
    jobs: dict[str, dict[str, Any] | None],
    attempts: dict[str, list[dict[str, Any]]],
    events: dict[str, list[dict[str, Any]]],
    seen: dict[str, GroupSeen],
    sampled_overlaps: list[dict[str, Any]],
    alive_at_end: list[str],
    ledger_total_microusd: int | None,
    weights_equal: dict[str, bool],
    ended_at: float,
) -> dict[str, Any]:
    """Every invariant of the chaos run; a violation is a count plus the facts behind it."""
    lost: list[str] = []
    unexplained: list[str] = []
    for job_id in submitted:
        job = jobs.get(job_id)
        if job is None or job["status"] not in TERMINAL:
            lost.append(job_id)
            continue
        if job["status"] != "SUCCEEDED":
            reasons = [e.get("reason") for e in events.get(job_id, [])]
            if not (job.get("status_reason") or (reasons and reasons[-1])):
                unexplained.append(job_id)

    duplicates: dict[str, list[str]] = {}
    for overlap in sampled_overlaps:
        duplicates.setdefault(overlap["job_id"], []).append(
            "processes: " + ",".join(overlap["attempts"])
        )
    for job_id, rows in attempts.items():
        spans = sorted(
            (_ts(a["started_at"]) or 0.0, _ts(a["ended_at"]) or ended_at, a["id"])
            for a in rows
            if a["started_at"] is not None
        )
        for (_, end_a, id_a), (start_b, _, id_b) in zip(spans, spans[1:], strict=False):
            if start_b < end_a:
                duplicates.setdefault(job_id, []).append(f"ledger: {id_a} overlaps {id_b}")

    unbilled: list[dict[str, Any]] = []
    costs_microusd = 0
    for job_id, rows in attempts.items():
        job = jobs.get(job_id)
        for a in rows:
            started, ended = _ts(a["started_at"]), _ts(a["ended_at"])
            if a["cost"] is not None:
                costs_microusd += round(a["cost"] * MICRO)
            group = seen.get(a["id"])
            if ended is None:
                if job is not None and job["status"] in TERMINAL and started is not None:
                    unbilled.append({"attempt": a["id"], "why": "open after its job ended",
                                     "seconds": ended_at - started})  # fmt: skip
                continue
            if started is not None and a["cost"] is None:
                unbilled.append({"attempt": a["id"], "why": "closed without a cost",
                                 "seconds": ended - started})  # fmt: skip
            elif started is not None and a["price_per_hour"]:
                owed = a["price_per_hour"] * (ended - started) / 3600
                short = owed - a["cost"]
                if short * MICRO > 1:
                    unbilled.append({"attempt": a["id"], "why": "cost below price x run time",
                                     "seconds": short / a["price_per_hour"] * 3600})  # fmt: skip
            if group is not None and group.last > ended + ALIVE_AFTER_END_TOLERANCE_S:
                unbilled.append({"attempt": a["id"], "why": "processes alive after it closed",
                                 "seconds": group.last - ended})  # fmt: skip
            if group is not None and started is not None and group.first < started - 1.0:
                unbilled.append({"attempt": a["id"], "why": "processes alive before it started",
                                 "seconds": started - group.first})  # fmt: skip
    closed = {a["id"] for rows in attempts.values() for a in rows if a["ended_at"] is not None}
    for attempt_id in alive_at_end:
        if attempt_id not in closed:
            continue  # still running: a lost job if the run timed out, not unbilled work
        first = seen[attempt_id].first if attempt_id in seen else ended_at
        unbilled.append({"attempt": attempt_id, "why": "processes alive at the end",
                         "seconds": ended_at - first})  # fmt: skip
    n_attempts = sum(len(rows) for rows in attempts.values())
    # Open attempts are counted by the usage report up to `now`: comparable only when all closed.
    ledger_comparable = len(closed) == n_attempts
    ledger_ok = not ledger_comparable or (
        ledger_total_microusd is not None
        and abs(ledger_total_microusd - costs_microusd) <= max(1, n_attempts)  # float rounding
    )
    mismatched = sorted(job_id for job_id, equal in weights_equal.items() if not equal)
    return {
        "jobs": len(submitted),
        "succeeded": sum(1 for j in jobs.values() if j and j["status"] == "SUCCEEDED"),
        "ended_otherwise_with_reason": sum(
            1 for j in jobs.values() if j and j["status"] in TERMINAL - {"SUCCEEDED"}
        )
        - len(unexplained),
        "attempts": n_attempts,
        "violations": {
            "lost_jobs": len(lost),
            "ended_without_reason": len(unexplained),
            "jobs_with_duplicate_attempts": len(duplicates),
            "unbilled_seconds": round(sum(u["seconds"] for u in unbilled), 3),
            "unbilled_attempts": len({u["attempt"] for u in unbilled}),
            "ledger_mismatch": 0 if ledger_ok else 1,
            "weights_mismatch": len(mismatched),
        },
        "ledger": {
            "usage_total_microusd": ledger_total_microusd,
            "sum_of_attempts_microusd": costs_microusd,
        },  # fmt: skip
        "weights_checked": len(weights_equal),
        "details": {
            "lost": lost,
            "unexplained": unexplained,
            "duplicates": duplicates,
            "unbilled": unbilled,
            "weights_mismatch": mismatched,
        },
    }


def coverage(
    injected: list[dict[str, Any]],
    kinds: tuple[str, ...],
    attempts: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    """What the run exercised: a run whose jobs end before every fault kind struck, or that saw
    no spot preemption, proves less than its zero violations say."""
    struck = {f["fault"] for f in injected}
    preempted = sum(1 for rows in attempts.values() for a in rows if a["end_reason"] == "preempted")
    missing = [kind for kind in kinds if kind not in struck]
    return {
        "fault_kinds_missing": missing,
        "preempted_attempts": preempted,
        "complete": not missing and preempted > 0,
    }


def violations_total(report: dict[str, Any]) -> float:
    return float(sum(report["violations"].values()))


# The run ---------------------------------------------------------------------------------------


def _retry(call: Any, *, attempts: int = 60) -> Any:
    """The API or its database may be down for a moment while a fault is injected."""
    for _ in range(attempts - 1):
        try:
            response = call()
            if response.status_code < 500:
                return response
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return call()


@contextlib.contextmanager
def services(tmp: Path, s3: S3Server | None = None) -> Iterator[tuple[S3Server, PostgresCluster]]:
    own_s3 = s3 is None
    server = s3 or start_s3_server(tmp / "seaweedfs")
    pg = PostgresCluster()
    try:
        pg.init()
        yield server, pg
    finally:
        pg.destroy()
        if own_s3:
            server.stop()


def inject(stack: Stack, pg: PostgresCluster, fault: str, rng: random.Random) -> None:
    down_s = rng.uniform(0.2, 2.0)
    if fault == "kill_worker":
        stack.kill("worker", signal.SIGKILL)
        time.sleep(down_s)
        stack.start_worker()
    elif fault == "kill_api":
        stack.kill("api", signal.SIGKILL)
        time.sleep(down_s)
        stack.start_api()
    elif fault == "restart_redis":
        stack.redis.stop()
        time.sleep(down_s)
        stack.redis.start()
    elif fault == "restart_postgres":
        pg.stop(mode="immediate")
        time.sleep(down_s)
        pg.start()
    else:
        raise ValueError(f"unknown fault {fault!r}")


def reference_weights(tmp: Path, trainer: dict[str, Any]) -> dict[str, Any]:
    """The same config, never interrupted, with the trainer in this process."""
    from trainer.__main__ import main as trainer_main
    from trainer.checkpoint.reader import load_latest

    directory = tmp / "reference"
    config = tmp / "reference.json"
    run = {"job_id": "reference", "trainer": trainer, "checkpoint_uri": str(directory)}
    config.write_text(json.dumps(run))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = trainer_main(["--config", str(config)])
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code != 0:
        raise RuntimeError(f"the reference run exited {code}")
    latest = load_latest(str(directory))
    if latest is None:
        raise RuntimeError("the reference run left no checkpoint")
    return dict(latest.shared["model"])


def run_chaos(
    *,
    tmp: Path,
    jobs: int,
    steps: int,
    seed: int,
    checkpoint_every: int = 25,
    faults: tuple[str, ...] = FAULTS,
    max_faults: int = 12,
    timeout_s: float = 900,
    s3: S3Server | None = None,
) -> dict[str, Any]:
    import torch

    from trainer.checkpoint.reader import load_latest

    rng = random.Random(seed)
    trainer = trainer_spec(steps=steps, checkpoint_every=checkpoint_every)
    trace = {"metadata": {"gap_seconds": 6}, "data": spot_trace(rng)}
    began = time.time()
    injected: list[dict[str, Any]] = []
    with services(tmp, s3) as (server, pg):
        stack = Stack(tmp=tmp, s3=server, trace=trace, pg_admin_url=pg.admin_url)
        sampler = Sampler(stack.home / "attempts")
        stack.start()
        try:
            sampler.start()
            submitted = [
                stack.submit({
                    "name": f"chaos-{i}",
                    "trainer": trainer,
                    "capacity": {"types": ["spot", "on_demand"]},
                    "deadline_hours": 4,
                    "estimated_hours": 0.02,
                })
                for i in range(jobs)
            ]  # fmt: skip
            plan = list(faults)
            rng.shuffle(plan)
            deadline = time.monotonic() + timeout_s
            with stack.client() as client:

                def statuses() -> dict[str, str]:
                    found: dict[str, str] = {}
                    for job_id in submitted:
                        response = _retry(lambda j=job_id: client.get(f"/v1/jobs/{j}"))
                        found[job_id] = response.json().get("status", "?")
                    return found

                while time.monotonic() < deadline:
                    if all(s in TERMINAL for s in statuses().values()):
                        break
                    if len(injected) >= max_faults:
                        time.sleep(1)
                        continue
                    time.sleep(rng.uniform(3.0, 10.0))
                    fault = plan.pop(0) if plan else rng.choice(faults)
                    at = round(time.time() - began, 2)
                    inject(stack, pg, fault, rng)
                    injected.append({"fault": fault, "at_s": at})
                    print(f"[chaos] {at:7.1f} s  {fault}", flush=True)
                time.sleep(3)  # the last closes and exits settle; anything alive after is a finding
                by_job = sampler.sample()
                sampler.stop()
                alive_at_end = [a for ids in by_job.values() for a in ids]
                ended_at = time.time()
                job_views: dict[str, dict[str, Any] | None] = {}
                attempt_views: dict[str, list[dict[str, Any]]] = {}
                event_views: dict[str, list[dict[str, Any]]] = {}
                for job_id in submitted:
                    response = _retry(lambda j=job_id: client.get(f"/v1/jobs/{j}"))
                    job_views[job_id] = response.json() if response.status_code == 200 else None
                    attempt_views[job_id] = _retry(
                        lambda j=job_id: client.get(f"/v1/jobs/{j}/attempts")
                    ).json()
                    event_views[job_id] = _retry(
                        lambda j=job_id: client.get(f"/v1/jobs/{j}/events")
                    ).json()
                since = (datetime.fromtimestamp(began, UTC) - timedelta(hours=1)).isoformat()
                usage = _retry(lambda: client.get("/v1/usage", params={"from": since}))
                ledger = (
                    usage.json()["total"]["cost_microusd"] if usage.status_code == 200 else None
                )
            weights_equal: dict[str, bool] = {}
            succeeded = [j for j, v in job_views.items() if v and v["status"] == "SUCCEEDED"]
            if succeeded:
                for key, value in server.env().items():
                    os.environ[key] = value
                reference = reference_weights(tmp, trainer)
                for job_id in succeeded:
                    ours = load_latest(stack.checkpoint_uri(job_id))
                    weights_equal[job_id] = (
                        ours is not None
                        and ours.step == steps
                        and set(ours.shared["model"]) == set(reference)
                        and all(
                            torch.equal(ours.shared["model"][k], v) for k, v in reference.items()
                        )
                    )
            report = check(
                submitted=submitted,
                jobs=job_views,
                attempts=attempt_views,
                events=event_views,
                seen=sampler.seen,
                sampled_overlaps=sampler.overlaps,
                alive_at_end=alive_at_end,
                ledger_total_microusd=ledger,
                weights_equal=weights_equal,
                ended_at=ended_at,
            )
            report["faults"] = injected
            report["coverage"] = coverage(injected, faults, attempt_views)
            report["restarted_on_their_own"] = dict(stack.restarts)
            report["end_states"] = {
                j: {"status": v["status"] if v else None,
                    "status_reason": v.get("status_reason") if v else None,
                    "progress": v.get("progress") if v else None,
                    "attempts": [(a["capacity_type"], a["end_reason"]) for a in attempt_views[j]]}
                for j, v in job_views.items()
            }  # fmt: skip
            report["wall_s"] = round(time.time() - began, 1)
            return report
        finally:
            sampler.stop()
            stack.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--max-faults", type=int, default=12)
    parser.add_argument("--timeout-s", type=float, default=480)
    parser.add_argument("--output", type=Path, default=RESULTS / "chaos.json")
    args = parser.parse_args(argv)
    # Trainers run as other uids when this runs as root: they must pass through the directory.
    tmp = open_directory()
    try:
        report = run_chaos(
            tmp=tmp,
            jobs=args.jobs,
            steps=args.steps,
            seed=args.seed,
            checkpoint_every=args.checkpoint_every,
            max_faults=args.max_faults,
            timeout_s=args.timeout_s,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "benchmark": "chaos",
        "command": "python -m benchmarks.chaos " + " ".join(argv or []),
        "config": {
            "jobs": args.jobs,
            "steps": args.steps,
            "seed": args.seed,
            "checkpoint_every": args.checkpoint_every,
            "max_faults": args.max_faults,
            "fault_kinds": list(FAULTS),
            "workload": {"gpt": TINY_GPT},
        },  # fmt: skip
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "goal": "every violation count 0, with every fault kind and a spot preemption exercised",
        **report,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    shown = ("jobs", "succeeded", "attempts", "violations", "ledger", "weights_checked", "faults",
             "coverage", "wall_s")  # fmt: skip
    summary = {k: result[k] for k in shown}
    print(json.dumps(summary, indent=2))
    if not report["coverage"]["complete"]:
        print("[chaos] the run did not exercise every fault and a preemption: give it more --steps")
    return 1 if violations_total(report) or not report["coverage"]["complete"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
