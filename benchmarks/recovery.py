"""Recovery from a spot preemption: notice -> first resumed training step, and steps lost.

    python -m benchmarks.recovery [--runs 5] [--up-s 30] [--gap-s 2]

Each run starts the shipped embedded server (`python -m worker.standalone`: API + scheduling and
reconciling loops in one process, SQLite in a fresh GPUJOBS_HOME, 0.2 s loop intervals) with the
local launcher and a trace spot market written here: spot for `up_s` seconds, gone for `gap_s`,
then back for good. One tiny-GPT job (spot or on-demand allowed, a generous deadline, so the
shipped policy rides spot and waits out a short gap) is preempted mid-training at the gap; the run
ends at the first training step of the next attempt. Modes: the SIGTERM checkpoint on
(`checkpoint.on_preemption`) and off, both with a checkpoint every 50 steps to fall back to.

notice -> resumed is split into
  detect:     notice (SIGTERM, the attempt's `notice` file) -> the reconciler closes the attempt
              as preempted (attempt.ended_at); sub-parts: the trainer's `preempted` event
              (current step + the checkpoint), the exit status file, then the reconcile tick
  reschedule: -> the next attempt row (created_at); includes any wait for spot to come back
              (reported on its own as `spot_wait_s`)
  launch:     -> the launcher started it (attempt.launched_at; the pid file's mtime alongside)
  restore:    -> the trainer's first step of the new attempt (its `first_step` event); sub-parts:
              launched -> the `resume` event (interpreters, imports, model/data build, checkpoint
              load) and resume -> first step
Steps lost = the last step the preempted attempt reached (its `preempted` event) minus the step
the next attempt resumed from (its `resume` event). Writes benchmarks/results/recovery.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from api.models import JobAttempt
from api.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
GOAL = {"notice_to_resumed_s_max": 15, "steps_lost_with_notice": 0}
LOOP_INTERVAL_S = 0.2
NOTICE_S = 10.0  # SIGTERM -> SIGKILL; a checkpoint of this model takes milliseconds
CHECKPOINT_EVERY_STEPS = 50
TINY_GPT = {"n_layer": 2, "n_embd": 32, "n_head": 4, "block_size": 32, "corpus_bytes": 200_000}
PARTS = ("detect_s", "reschedule_s", "launch_s", "restore_s")
SUBPARTS = (
    "notice_to_preempted_event_s",
    "preempted_event_to_exit_s",
    "exit_to_closed_s",
    "spot_wait_s",
    "launched_to_pid_file_s",
    "launched_to_resume_event_s",
    "resume_event_to_first_step_s",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_spec(on_preemption: bool) -> dict[str, Any]:
    return {
        "name": "recovery-bench",
        "trainer": {
            "workload": "gpt",
            "steps": 20_000,  # outlasts the run (it ends at the first resumed step); sane estimate
            "batch_size": 8,
            "amp": "bf16",
            "seed": 7,
            "dataloader": {"num_workers": 0},
            "args": TINY_GPT,
            "checkpoint": {"every_steps": CHECKPOINT_EVERY_STEPS, "on_preemption": on_preemption},
        },
        "capacity": {"types": ["spot", "on_demand"]},
        "deadline_hours": 24,
        "estimated_hours": 1,
    }


def records_in(lines: list[str]) -> list[dict[str, Any]]:
    """The trainer's JSON lines (its log also holds stderr logging)."""
    out = []
    for line in lines:
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
    return out


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return records_in(path.read_text(errors="replace").splitlines())


def first_event(records: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((r for r in records if r.get("event") == name), None)


def _epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


class Server:
    """One embedded server (worker.standalone) with its own home, trace and port."""

    def __init__(self, tmp: Path, *, up_s: int, gap_s: int) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.up_s, self.gap_s = up_s, gap_s
        trace = {
            "metadata": {"gap_seconds": 1.0, "note": "recovery benchmark: 1 = spot available"},
            "data": [1] * up_s + [0] * gap_s + [1] * 100_000,
        }
        self.trace_file = tmp / "trace.json"
        self.trace_file.write_text(json.dumps(trace))
        self.process: subprocess.Popen[bytes] | None = None
        self.token = ""

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
        env.update(
            GPUJOBS_HOME=str(self.home),
            GPUJOBS_CREDENTIALS_FILE=str(self.tmp / "credentials.json"),
            GPUJOBS_PORT=str(self.port),
            GPUJOBS_SCHEDULE_INTERVAL_S=str(LOOP_INTERVAL_S),
            GPUJOBS_RECONCILE_INTERVAL_S=str(LOOP_INTERVAL_S),
            GPUJOBS_SPOT_MARKET="trace",
            GPUJOBS_SPOT_TRACE=str(self.trace_file),
            GPUJOBS_SPOT_TRACE_TIME_SCALE="1",
            GPUJOBS_SPOT_NOTICE_S=str(NOTICE_S),
            PYTHONUNBUFFERED="1",
        )
        log = open(self.tmp / "server.log", "ab")  # noqa: SIM115 - kept open for the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "worker.standalone"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"server did not start: {self.log()[-3000:]}")
        self.token = json.loads((self.tmp / "credentials.json").read_text())["token"]

    @property
    def attempts_dir(self) -> Path:
        """Where the server keeps its attempts' directories: its trainers' home, which is not
        `home` when the server runs as root from a folder others cannot pass."""
        return Settings(home=self.home, trainer_home=None).trainer_home_dir() / "attempts"

    @property
    def t0(self) -> float:
        """The market's origin: spot goes away at t0 + up_s and is back at t0 + up_s + gap_s."""
        return float(json.loads((self.home / "market.json").read_text())["t0"])

    def log(self) -> str:
        path = self.tmp / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=10
        )

    def attempts(self) -> list[JobAttempt]:
        engine = create_engine(f"sqlite:///{self.home / 'gpujobs.db'}")
        try:
            with Session(engine) as session:
                rows = session.scalars(select(JobAttempt).order_by(JobAttempt.number)).all()
                session.expunge_all()
                return list(rows)
        finally:
            engine.dispose()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Trainer process groups outlive the server by design: stop the ones this run started.
        for pid_file in self.attempts_dir.glob("*/pid"):
            with contextlib.suppress(ProcessLookupError, ValueError, KeyError, TypeError):
                os.killpg(int(json.loads(pid_file.read_text())["pid"]), signal.SIGKILL)


def _wait(predicate: Any, *, timeout: float, what: str, server: Server) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}\nserver log:\n{server.log()[-3000:]}")


def one_run(*, on_preemption: bool, up_s: int, gap_s: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="gpujobs-recovery-"))
    # Others may pass (not list) it, so a root server keeps its trainers' directories under it
    # and they go with it when the run is over.
    tmp.chmod(0o711)
    server = Server(tmp, up_s=up_s, gap_s=gap_s)
    try:
        server.start()
        with server.client() as client:
            response = client.post("/v1/jobs", json=job_spec(on_preemption))
            response.raise_for_status()
            job_id = response.json()["id"]
        attempts_dir = server.attempts_dir

        def resumed() -> list[JobAttempt] | None:
            rows = server.attempts()
            if rows and rows[0].end_reason not in (None, "preempted"):
                raise RuntimeError(f"attempt 1 ended {rows[0].end_reason}\n{_diagnostics(server)}")
            if len(rows) >= 2 and rows[1].launch_handle:
                log = attempts_dir / rows[1].id / "trainer.log"
                if first_event(_records(log), "first_step") is not None:
                    return rows
            return None

        rows = _wait(resumed, timeout=up_s + gap_s + 180, what="the resumed step", server=server)
        with server.client() as client:
            client.post(f"/v1/jobs/{job_id}/cancel")
        return _figures(server, rows, on_preemption=on_preemption)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _diagnostics(server: Server) -> str:
    lines = [
        f"attempt {a.number}: {a.capacity_type} {a.end_reason} exit {a.exit_code}"
        for a in server.attempts()
    ]
    for log in sorted(server.attempts_dir.glob("*/trainer.log")):
        lines.append(f"--- {log.parent.name}\n{log.read_text(errors='replace')[-2000:]}")
    lines.append(f"--- server log\n{server.log()[-2000:]}")
    return "\n".join(lines)


def _figures(server: Server, rows: list[JobAttempt], *, on_preemption: bool) -> dict[str, Any]:
    first, second = rows[0], rows[1]
    d1 = server.attempts_dir / first.id
    d2 = server.attempts_dir / second.id
    log1, log2 = _records(d1 / "trainer.log"), _records(d2 / "trainer.log")
    preempted = first_event(log1, "preempted")
    resume = first_event(log2, "resume")
    first_step = first_event(log2, "first_step")
    assert preempted is not None and resume is not None and first_step is not None
    notice = float((d1 / "notice").read_text())
    exited = (d1 / "exit_code").stat().st_mtime
    ended = _epoch(first.ended_at)
    created = _epoch(second.created_at)
    launched = _epoch(second.launched_at)
    assert ended is not None and created is not None and launched is not None
    spot_back = server.t0 + server.up_s + server.gap_s
    checkpoints = [r["step"] for r in log1 if r.get("event") == "checkpoint"]
    return {
        "on_preemption": on_preemption,
        "attempts": [(a.capacity_type, a.end_reason) for a in rows[:2]],
        "notice_to_resumed_s": first_step["time"] - notice,
        "detect_s": ended - notice,
        "reschedule_s": created - ended,
        "launch_s": launched - created,
        "restore_s": first_step["time"] - launched,
        "notice_to_preempted_event_s": preempted["time"] - notice,
        "preempted_event_to_exit_s": exited - preempted["time"],
        "exit_to_closed_s": ended - exited,
        "spot_wait_s": max(0.0, spot_back - ended),
        "launched_to_pid_file_s": (d2 / "pid").stat().st_mtime - launched,
        "launched_to_resume_event_s": resume["time"] - launched,
        "resume_event_to_first_step_s": first_step["time"] - resume["time"],
        "preempted_at_step": preempted["step"],
        "checkpoint_saved_on_notice": preempted.get("saved"),
        "last_periodic_checkpoint": max(
            (s for s in checkpoints if s % CHECKPOINT_EVERY_STEPS == 0), default=None
        ),
        "resumed_from_step": resume["step"],
        "steps_lost": preempted["step"] - resume["step"],
        "steps_lost_recorded": first.steps_lost,  # the reconciler's figure, from job progress
        "exit_code": first.exit_code,
    }


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def _import_seconds(module: str, repeats: int = 3) -> float:
    """Median wall time of a fresh interpreter importing `module` (part of every restore)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, check=True)
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 3)


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "device": "cpu (the trainer runs on CPU here)",
        "interpreter_start_s": _import_seconds("sys"),
        "import_torch_s": _import_seconds("torch"),
        "import_trainer_loop_s": _import_seconds("trainer.loop"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per mode")
    parser.add_argument("--up-s", type=int, default=30, help="seconds of spot before the gap")
    parser.add_argument("--gap-s", type=int, default=2, help="seconds without spot")
    args = parser.parse_args(argv)

    runs: dict[str, list[dict[str, Any]]] = {
        "notice_checkpoint_on": [],
        "notice_checkpoint_off": [],
    }
    for i in range(args.runs):
        for mode, notice in (("notice_checkpoint_on", True), ("notice_checkpoint_off", False)):
            run = one_run(on_preemption=notice, up_s=args.up_s, gap_s=args.gap_s)
            runs[mode].append(run)
            print(
                f"[{mode} {i + 1}/{args.runs}] notice->resumed {run['notice_to_resumed_s']:.2f} s"
                f" (detect {run['detect_s']:.2f}, reschedule {run['reschedule_s']:.2f}, launch "
                f"{run['launch_s']:.2f}, restore {run['restore_s']:.2f}); "
                f"steps lost {run['steps_lost']}",
                flush=True,
            )

    def per_mode(mode: str) -> dict[str, Any]:
        rs = runs[mode]
        keys = ("notice_to_resumed_s", *PARTS, *SUBPARTS, "steps_lost")
        return {key: _summary([float(r[key]) for r in rs]) for key in keys}

    on, off = per_mode("notice_checkpoint_on"), per_mode("notice_checkpoint_off")
    result = {
        "benchmark": "recovery",
        "notice_to_resumed_s": on["notice_to_resumed_s"]["median"],
        "notice_to_resumed_s_max": on["notice_to_resumed_s"]["max"],
        "steps_lost_with_notice": on["steps_lost"]["median"],
        "steps_lost_without_notice": off["steps_lost"]["median"],
        **{part: on[part] for part in PARTS},
        "goal": GOAL,
        "meets_goal": on["notice_to_resumed_s"]["max"] <= GOAL["notice_to_resumed_s_max"]
        and on["steps_lost"]["median"] <= GOAL["steps_lost_with_notice"],
        "summary": {"notice_checkpoint_on": on, "notice_checkpoint_off": off},
        "runs": runs,
        "setup": {
            "server": "python -m worker.standalone: API + loops in one process, SQLite, local",
            "schedule_interval_s": LOOP_INTERVAL_S,
            "reconcile_interval_s": LOOP_INTERVAL_S,
            "spot_notice_s": NOTICE_S,
            "spot_market": f"trace: spot {args.up_s} s, none {args.gap_s} s, then spot again",
            "capacity_types": ["spot", "on_demand"],
            "policy_note": "the shipped policy waits for spot while the deadline has slack; "
            "the wait is inside reschedule_s and reported as spot_wait_s",
            "checkpoint_every_steps": CHECKPOINT_EVERY_STEPS,
            "workload": {"workload": "gpt", "args": TINY_GPT, "batch_size": 8},
            "runs_per_mode": args.runs,
        },
        "machine": machine_info(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "recovery.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("notice_to_resumed_s", *PARTS)}, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
