"""Load test: POST /v1/jobs + GET /v1/jobs/{id} at fixed concurrency, ours vs the stack's ceiling.

    python -m benchmarks.api_load [--concurrency 32] [--seconds 20]

Both servers run on PostgreSQL with the same uvicorn settings, one at a time, driven by a load
generator in its own process. Writes benchmarks/results/api_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PG_ADMIN = os.environ.get(
    "GPUJOBS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
SPEC = {"name": "bench", "trainer": {"steps": 100}, "deadline_hours": 6}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fresh_database(name: str) -> str:
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


def _wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"server at {url} did not start")


def _serve(app: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env})


async def _user(
    client: httpx.AsyncClient, headers: dict[str, str], stop: float, out: dict[str, list[float]]
) -> None:
    while time.perf_counter() < stop:
        started = time.perf_counter()
        response = await client.post("/v1/jobs", json=SPEC, headers=headers)
        posted = time.perf_counter()
        if response.status_code != 201:
            out["errors"].append(float(response.status_code))
            continue
        out["post"].append(posted - started)
        job_id = response.json()["id"]
        response = await client.get(f"/v1/jobs/{job_id}", headers=headers)
        if response.status_code != 200:
            out["errors"].append(float(response.status_code))
            continue
        out["get"].append(time.perf_counter() - posted)


async def _drive(url: str, token: str, concurrency: int, seconds: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out: dict[str, list[float]] = {"post": [], "get": [], "errors": []}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        for _ in range(20):  # warm-up: connections, caches, JIT-free Python paths
            await client.post("/v1/jobs", json=SPEC, headers=headers)
        started = time.perf_counter()
        stop = started + seconds
        await asyncio.gather(*(_user(client, headers, stop, out) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies = sorted(out["post"] + out["get"])
    return {
        "requests": len(latencies),
        "errors": len(out["errors"]),
        "seconds": round(elapsed, 3),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(_quantile(latencies, 0.50) * 1000, 2),
        "p99_ms": round(_quantile(latencies, 0.99) * 1000, 2),
        "post_p50_ms": round(_quantile(sorted(out["post"]), 0.50) * 1000, 2),
        "get_p50_ms": round(_quantile(sorted(out["get"]), 0.50) * 1000, 2),
    }


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def _load_process(url: str, token: str, concurrency: int, seconds: float, queue: Any) -> None:
    queue.put(asyncio.run(_drive(url, token, concurrency, seconds)))


def _measure(url: str, token: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """The load generator runs in its own process so it does not share the server's GIL."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_load_process, args=(url, token, concurrency, seconds, queue))
    process.start()
    result = queue.get(timeout=seconds + 120)
    process.join()
    return result


def _run_ours(concurrency: int, seconds: float) -> dict[str, Any]:
    url = _fresh_database("gpujobs_bench_api")
    env = {"GPUJOBS_DATABASE_URL": url, "GPUJOBS_HOME": str(ROOT / ".gpujobs" / "bench")}
    subprocess.run(
        [sys.executable, "-m", "api.admin", "migrate"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    token = subprocess.run(
        [sys.executable, "-m", "api.admin", "create-team", f"bench-{uuid.uuid4().hex[:6]}"],
        cwd=ROOT, env={**os.environ, **env}, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    port = _free_port()
    server = _serve("api.main:app", port, env)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/healthz", server)
        return _measure(f"http://127.0.0.1:{port}", token, concurrency, seconds)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


def _run_baseline(concurrency: int, seconds: float) -> dict[str, Any]:
    url = _fresh_database("gpujobs_bench_baseline")
    port = _free_port()
    server = _serve("benchmarks.api_baseline:app", port, {"BASELINE_DATABASE_URL": url})
    try:
        _wait_ready(f"http://127.0.0.1:{port}/docs", server)
        return _measure(f"http://127.0.0.1:{port}", "", concurrency, seconds)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "api_load.json")
    args = parser.parse_args(argv)
    ours = _run_ours(args.concurrency, args.seconds)
    baseline = _run_baseline(args.concurrency, args.seconds)
    result = {
        "benchmark": "api_load",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "concurrency": args.concurrency,
        "seconds": args.seconds,
        "database": "postgresql",
        "ours": ours,
        "baseline": baseline,
        "throughput_ratio": round(ours["requests_per_s"] / baseline["requests_per_s"], 3),
        "p99_ratio": round(ours["p99_ms"] / baseline["p99_ms"], 3),
        "goal": {"throughput_ratio_min": 0.6, "p99_ratio_max": 2.0},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
