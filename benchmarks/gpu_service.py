"""GPU acceptance, the `service` part: the embedded service as root with a simulated spot
market, two jobs on on-demand and one on spot, their final weights compared
(benchmarks/gpu_e2e.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.gpu_resume import compare

if TYPE_CHECKING:
    from benchmarks.gpu_e2e import Sizes

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def _embedded_service(home: Path, sizes: Sizes) -> Iterator[tuple[str, str]]:
    from devstack.ports import free_port, wait_for
    from gpujobs.config import stored_token

    port = free_port()
    credentials = home / "credentials.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env |= {
        "GPUJOBS_HOME": str(home / "state"),
        "GPUJOBS_PORT": str(port),
        "GPUJOBS_CREDENTIALS_FILE": str(credentials),
        "GPUJOBS_SPOT_MARKET": "trace",
        "GPUJOBS_SPOT_TRACE": str(_trace_file(home, sizes.spot_trace)),
        "PYTHONUNBUFFERED": "1",
    }
    log = open(home / "service.log", "wb")  # noqa: SIM115 - the service's, closed below
    service = subprocess.Popen(
        [sys.executable, "-m", "worker.standalone"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        # The token is written before the first start lays out the trainers' runtime and
        # serves: wait for both.
        def up() -> bool:
            return bool(stored_token(credentials, url=url)) and _ready(url)

        wait_for(lambda: service.poll() is not None or up(), timeout=300, what="the service")
        token = stored_token(credentials, url=url)
        if service.poll() is not None or token is None:
            raise RuntimeError((home / "service.log").read_text()[-3000:])
        yield url, token
    finally:
        os.killpg(service.pid, signal.SIGTERM)
        try:
            service.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
        log.close()


def _trace_file(home: Path, availability: tuple[int, ...]) -> Path:
    """A spot trace the local market replays: a tick of 600 simulated seconds is 10 s of wall
    time at its x60, so the notices come when the run needs them, not at random."""
    path = home / "spot-trace.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": list(availability)}))
    return path


def _ready(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _job_spec(name: str, sizes: Sizes, *, capacity: str, amp: str) -> dict[str, Any]:
    return {
        "name": name,
        "trainer": {
            "workload": "gpt",
            "steps": sizes.service_steps,
            "batch_size": sizes.batch,
            "amp": amp,
            "seed": 11,
            "deterministic": True,
            "dataloader": {"num_workers": 0},
            "checkpoint": {"every_steps": max(1, sizes.service_steps // 10), "keep_last": 2},
            "args": {**sizes.resume_model, "corpus_bytes": 1_000_000},
        },
        "capacity": {"types": [capacity]},
        "deadline_hours": 4,
        "estimated_hours": 0.05,
    }


def part_service(sizes: Sizes, *, work: Path, amp: str) -> dict[str, Any]:
    import httpx

    from api.settings import Settings
    from gpujobs.checkpoints import job_checkpoint_uri
    from gpujobs.client import Client
    from trainer.checkpoint import load_latest

    with _embedded_service(work, sizes) as (url, token):
        client = Client(url=url, token=token)
        specs = {
            "on-demand-a": _job_spec("gpu-e2e-a", sizes, capacity="on_demand", amp=amp),
            "on-demand-b": _job_spec("gpu-e2e-b", sizes, capacity="on_demand", amp=amp),
            "spot": _job_spec("gpu-e2e-spot", sizes, capacity="spot", amp=amp),
        }
        jobs = {label: client.submit(spec).id for label, spec in specs.items()}
        done = {label: client.wait(job, timeout=1800, poll=1.0) for label, job in jobs.items()}
        attempts = {label: client.attempts(job) for label, job in jobs.items()}
        try:
            logs = {label: client.logs(job)[-2000:] for label, job in jobs.items()}
        except httpx.HTTPError:
            logs = {}
    root = Settings(home=work / "state").checkpoint_root()
    weights = {}
    for label, job in jobs.items():
        state = load_latest(job_checkpoint_uri(root, job))
        weights[label] = None if state is None else state.shared["model"]
    comparisons = {}
    for left, right in (("on-demand-a", "on-demand-b"), ("on-demand-a", "spot")):
        a, b = weights[left], weights[right]
        comparisons[f"{left} vs {right}"] = (
            compare(a, b) if a is not None and b is not None else {"error": "no weights"}
        )
    preemptions = sum(1 for a in attempts["spot"] if a.end_reason == "preempted")
    statuses = {label: str(job.status) for label, job in done.items()}
    failed = {k: logs.get(k, "") for k, v in statuses.items() if not v.endswith("SUCCEEDED")}
    return {
        "amp": amp,
        "steps": sizes.service_steps,
        "statuses": statuses,
        "attempts": {label: len(items) for label, items in attempts.items()},
        "spot_preemptions": preemptions,
        "weights": comparisons,
        "all_succeeded": all(status.endswith("SUCCEEDED") for status in statuses.values()),
        "failed_logs": failed,
    }
