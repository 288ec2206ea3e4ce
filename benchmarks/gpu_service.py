"""GPU acceptance, the `service` part: the embedded service as root with a simulated spot
market, two jobs on on-demand and one on spot, their final weights compared
(benchmarks/gpu_e2e.py)."""

from __future__ import annotations

import json
import math
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


JOBS = 3  # trainers the service runs at once: two on on-demand, one on spot
# On a CPU: a thread per trainer. Three trainers with torch's thread per core each thrash two
# cores (CI ran them 20x slower than one alone), and the run's length is sized from their rate.
CPU_THREADS = {"OMP_NUM_THREADS": "1"}


@contextmanager
def _embedded_service(
    home: Path, sizes: Sizes, extra_env: dict[str, str]
) -> Iterator[tuple[str, str]]:
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
    } | extra_env
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


TICK_S = 10.0  # wall-clock seconds per tick of the spot trace (_trace_file)


def longest_spot_window_s(availability: tuple[int, ...]) -> float:
    """The longest stretch of spot, in wall-clock seconds, that ends in a notice.

    The trace's tail of spot that never ends is not one: it is there so the job can finish.
    """
    longest = run = 0
    for available in availability:
        if available:
            run += 1
        else:
            longest, run = max(longest, run), 0
    return longest * TICK_S


def outlasting_steps(availability: tuple[int, ...], steps_per_s: float) -> int:
    """Steps a job needs so that, even at the rate measured on an idle machine, it runs past
    the end of any window of spot it starts in: three times the longest window's worth. Twice
    was not enough once: inside make test the rate is measured beside the Kubernetes tests'
    load, which can be gone by the time the job runs, and the spot job ended unpreempted."""
    return max(1, math.ceil(3 * longest_spot_window_s(availability) * steps_per_s))


def _rate_side_by_side(trainer: dict[str, Any], scratch: Path, env: dict[str, str]) -> float:
    """Steps a second of the slowest of JOBS trainers run at once, as the service runs them."""
    from concurrent.futures import ThreadPoolExecutor

    from devstack.workloads import trainer_steps_per_second

    def one(i: int) -> float:
        (scratch / str(i)).mkdir(parents=True)
        return trainer_steps_per_second(trainer, scratch=scratch / str(i), steps=400, env=env)

    with ThreadPoolExecutor(JOBS) as pool:
        return min(pool.map(one, range(JOBS)))


def _trainer(sizes: Sizes, *, steps: int, amp: str) -> dict[str, Any]:
    return {
        "workload": "gpt",
        "steps": steps,
        "batch_size": sizes.batch,
        "amp": amp,
        "seed": 11,
        "deterministic": True,
        "dataloader": {"num_workers": 0},
        "checkpoint": {"every_steps": max(1, steps // 10), "keep_last": 2},
        "args": {**sizes.resume_model, "corpus_bytes": 1_000_000},
    }


def _job_spec(name: str, trainer: dict[str, Any], *, capacity: str) -> dict[str, Any]:
    return {
        "name": name,
        "trainer": trainer,
        "capacity": {"types": [capacity]},
        "deadline_hours": 4,
        "estimated_hours": 0.05,
    }


def part_service(sizes: Sizes, *, work: Path, amp: str) -> dict[str, Any]:
    import httpx
    import torch

    from api.settings import Settings
    from gpujobs.checkpoints import job_checkpoint_uri
    from gpujobs.client import Client
    from trainer.checkpoint import load_latest

    extra_env = {} if torch.cuda.is_available() else CPU_THREADS
    steps, rate = sizes.service_steps, None
    if steps is None:
        rate = _rate_side_by_side(_trainer(sizes, steps=1, amp=amp), work / "rate", extra_env)
        steps = outlasting_steps(sizes.spot_trace, rate)
    trainer = _trainer(sizes, steps=steps, amp=amp)
    with _embedded_service(work, sizes, extra_env) as (url, token):
        client = Client(url=url, token=token)
        specs = {
            "on-demand-a": _job_spec("gpu-e2e-a", trainer, capacity="on_demand"),
            "on-demand-b": _job_spec("gpu-e2e-b", trainer, capacity="on_demand"),
            "spot": _job_spec("gpu-e2e-spot", trainer, capacity="spot"),
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
        "steps": steps,
        "measured_steps_per_s": rate,
        "statuses": statuses,
        "attempts": {label: len(items) for label, items in attempts.items()},
        "spot_preemptions": preemptions,
        "weights": comparisons,
        "all_succeeded": all(status.endswith("SUCCEEDED") for status in statuses.values()),
        "failed_logs": failed,
    }
