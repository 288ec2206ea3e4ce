"""Standby (make-before-break): a trainer that builds, then waits for the control plane's `go`
while another attempt of the job trains into the same store, and only then resumes, from the
newest checkpoint. Played against a real HTTP server standing in for the control plane."""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch

from gpujobs.runtime import (
    ENV_JOB_TOKEN,
    EXIT_CONFIG_ERROR,
    EXIT_PREEMPTED,
    EXIT_PREEMPTED_NO_CHECKPOINT,
)
from tests.trainer.trainer_runs import (
    TrainerProcess,
    assert_same_weights,
    free_port,
    run_config,
    run_in_process,
)
from trainer.checkpoint import latest_complete_step, load_latest
from trainer.config import ConfigError

TOKEN = "job-token"
JOB = "job-s"
ATTEMPT = "attempt-2"
STEPS = 24
# Dropout draws from the RNG and accumulation splits each step: a resume that restored anything
# less than everything would not end bitwise equal.
SPEC: dict[str, Any] = {
    "steps": STEPS,
    "grad_accum_steps": 2,
    "checkpoint": {"every_steps": 4, "keep_last": 2},
}

Reply = tuple[int, bytes]


def answer(action: str, resume_from_step: int | None = None) -> Reply:
    return 200, json.dumps({"action": action, "resume_from_step": resume_from_step}).encode()


WAIT = answer("wait")
UNAVAILABLE: Reply = (503, b"busy")


@dataclass
class Call:
    path: str
    authorization: str | None
    body: Any


class ControlPlane(ThreadingHTTPServer):
    """The server's side of the standby endpoint: each call gets the next scripted reply, then
    `then` (which the test may change); every call is recorded. Progress reports (the attempt's
    once it trains) are recorded apart."""

    daemon_threads = True

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.calls: list[Call] = []
        self.reports: list[Call] = []
        self.script: list[Reply] = []
        self.then: Reply = WAIT
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def take(self, call: Call) -> Reply:
        with self.lock:
            self.calls.append(call)
            return self.script.pop(0) if self.script else self.then

    def wait_for_calls(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.calls) < count:
            assert time.monotonic() < deadline, f"only {len(self.calls)} standby calls"
            time.sleep(0.02)

    def start(self) -> ControlPlane:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ControlPlane

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        call = Call(self.path, self.headers["Authorization"], json.loads(raw))
        if self.path.endswith("/progress"):
            self.server.reports.append(call)
            status, body = 204, b""
        else:
            status, body = self.server.take(call)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    server = ControlPlane().start()
    yield server
    server.stop()


def config(uri: str, **trainer: Any) -> dict[str, Any]:
    cfg = run_config(uri, **{**SPEC, **trainer})
    cfg["trainer"]["args"]["dropout"] = 0.1
    return {**cfg, "job_id": JOB}


def standby_config(
    uri: str, api_url: str | None, *, poll_s: float = 0.05, **trainer: Any
) -> dict[str, Any]:
    cfg = {**config(uri, **trainer), "standby": True, "attempt_id": ATTEMPT}
    cfg["standby_poll_s"] = poll_s
    if api_url is not None:
        cfg["api_url"] = api_url
    return cfg


def snapshot(root: Path) -> dict[str, str]:
    """Every file under the store, hidden ones included, by content."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def plant_running_attempts_save(root: Path) -> dict[str, str]:
    """What the running attempt has in the store mid-save: a checkpoint without its manifest
    yet and a file still being written. A starting attempt's cleanup would delete both."""
    step = root / "step-000000000012"
    step.mkdir(parents=True)
    (step / "shared.pt").write_bytes(b"half of the running attempt's checkpoint")
    (step / ".rank-0.pt.x1y2.tmp").write_bytes(b"being written")
    return snapshot(root)


def assert_asked_as_the_attempt(calls: list[Call]) -> None:
    assert calls
    for call in calls:
        assert call.path == f"/v1/jobs/{JOB}/standby"
        assert call.authorization == f"Bearer {TOKEN}"
        assert call.body == {"attempt_id": ATTEMPT}


def final_weights(uri: str) -> dict[str, torch.Tensor]:
    state = load_latest(uri)
    assert state is not None and state.step == STEPS
    return state.shared["model"]


def preempt_at(run: TrainerProcess, step: int) -> int:
    """SIGTERM once the run has reached `step`; the step it saved and stopped at."""
    run.wait_for_step(step)
    run.interrupt(signal.SIGTERM)
    assert run.wait() == EXIT_PREEMPTED, run.stderr()
    (preempted,) = run.events("preempted")
    assert preempted["saved"], run.stderr()
    stopped: int = preempted["step"]
    return stopped


def test_a_standby_waits_then_resumes_the_newest_checkpoint_bitwise(
    tmp_path: Path, plane: ControlPlane
) -> None:
    whole = TrainerProcess(config(str(tmp_path / "whole")), tmp_path / "whole-run")
    assert whole.wait() == 0, whole.stderr()
    reference = final_weights(str(tmp_path / "whole"))

    root = tmp_path / "ckpt"
    uri = str(root)
    first_stop = preempt_at(TrainerProcess(config(uri), tmp_path / "a1"), 6)
    before_standby = snapshot(root)

    standby = TrainerProcess(
        standby_config(uri, plane.url), tmp_path / "standby", env={ENV_JOB_TOKEN: TOKEN}
    )
    plane.wait_for_calls(3)  # built and waiting: it asks only once built
    assert snapshot(root) == before_standby

    # The running attempt trains on, writing (and pruning) checkpoints while the standby waits.
    second = TrainerProcess(config(uri), tmp_path / "a2")
    second_stop = preempt_at(second, first_stop + 6)
    assert second.events("resume")[0]["step"] == first_stop
    assert first_stop < second_stop < STEPS
    after_second = snapshot(root)
    assert latest_complete_step(uri) == second_stop

    asked = len(plane.calls)
    plane.wait_for_calls(asked + 3)
    assert standby.process.poll() is None, standby.stderr()
    assert snapshot(root) == after_second, "the waiting standby changed the store"

    plane.then = answer("go", second_stop)
    assert standby.wait() == 0, standby.stderr()
    events = [r["event"] for r in standby.records if "event" in r]
    assert events[:3] == ["standby", "handover", "resume"]
    assert standby.events("handover")[0]["resume_from_step"] == second_stop
    assert standby.events("resume")[0]["step"] == second_stop
    assert standby.events("done")[0]["step"] == STEPS
    assert_same_weights(final_weights(uri), reference)
    assert_asked_as_the_attempt(plane.calls)
    # Handed over, it reports progress as any running attempt does.
    assert plane.reports and plane.reports[-1].body["step"] == STEPS
    assert plane.reports[-1].authorization == f"Bearer {TOKEN}"
    assert plane.reports[-1].body["attempt_id"] == ATTEMPT


def test_stop_ends_the_standby_without_touching_the_store(
    tmp_path: Path, plane: ControlPlane
) -> None:
    root = tmp_path / "ckpt"
    planted = plant_running_attempts_save(root)
    plane.script = [WAIT, WAIT]
    plane.then = answer("stop")
    result, records = run_in_process(
        standby_config(str(root), plane.url), environ={ENV_JOB_TOKEN: TOKEN}
    )
    assert result.exit_code == EXIT_PREEMPTED_NO_CHECKPOINT
    assert result.steps_run == 0 and result.checkpoint_step is None
    assert snapshot(root) == planted
    assert [r["event"] for r in records if "event" in r] == ["standby", "standby_stopped"]
    assert len(plane.calls) == 3, "no call after the stop"
    assert_asked_as_the_attempt(plane.calls)


@pytest.mark.parametrize("refused", [401, 404])
def test_a_refused_call_ends_the_standby_as_a_stop(
    tmp_path: Path, plane: ControlPlane, refused: int
) -> None:
    """Its job's token revoked (the job ended) or its attempt unknown: no answer will come, and
    waiting on would hold the capacity for nothing."""
    root = tmp_path / "ckpt"
    planted = plant_running_attempts_save(root)
    plane.script = [WAIT]
    plane.then = (refused, b'{"detail": "no"}')
    result, records = run_in_process(
        standby_config(str(root), plane.url), environ={ENV_JOB_TOKEN: TOKEN}
    )
    assert result.exit_code == EXIT_PREEMPTED_NO_CHECKPOINT and result.steps_run == 0
    assert snapshot(root) == planted
    assert [r["event"] for r in records if "event" in r] == ["standby", "standby_stopped"]
    assert len(plane.calls) == 2


def test_sigterm_while_waiting_exits_76_at_once_without_touching_the_store(
    tmp_path: Path, plane: ControlPlane
) -> None:
    root = tmp_path / "ckpt"
    planted = plant_running_attempts_save(root)
    # A long pause between calls: the notice must cut it short, not wait it out.
    cfg = standby_config(str(root), plane.url, poll_s=60)
    standby = TrainerProcess(cfg, tmp_path / "standby", env={ENV_JOB_TOKEN: TOKEN})
    plane.wait_for_calls(1)
    noticed = time.monotonic()
    standby.interrupt(signal.SIGTERM)
    assert standby.wait() == EXIT_PREEMPTED_NO_CHECKPOINT, standby.stderr()
    assert time.monotonic() - noticed < 15
    # A standby stopped, not a run preempted: it never trained, so no step was lost.
    [stopped] = standby.events("standby_stopped")
    assert stopped["noticed"] is True
    assert not standby.events("preempted")
    assert not standby.events("handover") and not standby.events("start")
    assert snapshot(root) == planted
    assert len(plane.calls) == 1


def test_unreachable_or_failing_server_keeps_it_waiting_then_it_trains(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    planes: list[ControlPlane] = []

    def start_answering() -> None:
        plane = ControlPlane(port)
        plane.script = [UNAVAILABLE, UNAVAILABLE, (200, b"not an answer")]
        plane.then = answer("go")
        planes.append(plane.start())

    def failed_to_connect() -> bool:
        return any(r.levelno == logging.WARNING for r in caplog.records)

    def start_once_refused() -> None:
        deadline = time.monotonic() + 60
        while not failed_to_connect() and time.monotonic() < deadline:
            time.sleep(0.01)
        start_answering()

    # Nothing listens at first (connection refused); then the server answers 503, then garbage.
    later = threading.Thread(target=start_once_refused)
    caplog.set_level(logging.INFO, logger="trainer.standby")
    later.start()
    try:
        result, records = run_in_process(
            standby_config(str(tmp_path / "ckpt"), f"http://127.0.0.1:{port}", steps=6),
            environ={ENV_JOB_TOKEN: TOKEN},
        )
    finally:
        later.join()
        for plane in planes:
            plane.stop()
    (plane,) = planes
    assert result.exit_code == 0 and result.step == 6 and result.resumed_from is None
    events = [r["event"] for r in records if "event" in r]
    assert events[:3] == ["standby", "handover", "start"]
    assert len(plane.calls) == 4, "it asks until it is answered, and not after"
    assert_asked_as_the_attempt(plane.calls)
    failures = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(failures) == 1, "one line for the whole streak of failures"
    assert "refused" in failures[0]


@pytest.mark.parametrize(
    ("drop", "named"),
    [("api_url", "api_url"), ("token", ENV_JOB_TOKEN), ("attempt_id", "attempt_id")],
)
def test_a_standby_that_cannot_ask_is_a_configuration_error(
    tmp_path: Path, drop: str, named: str
) -> None:
    root = tmp_path / "ckpt"
    cfg = standby_config(str(root), "http://127.0.0.1:9")
    environ = {ENV_JOB_TOKEN: TOKEN}
    if drop == "token":
        environ = {}
    else:
        cfg.pop(drop)
    with pytest.raises(ConfigError, match=named):
        run_in_process(cfg, environ=environ)
    assert not root.exists(), "refused before the store is opened"


def test_a_run_reads_its_resume_point_before_it_builds_and_a_standby_after(
    tmp_path: Path, plane: ControlPlane
) -> None:
    """One resume with two faults, refused for the one each order meets first: the checkpoint
    computes something else (found by reading the store), the workload cannot checkpoint its
    gradients (found by building). A run that trains at once reads first; a standby builds
    first, and it fails there without asking for the handover or touching the store."""
    root = tmp_path / "ckpt"
    saving = run_config(
        str(root),
        workload="trainer.examples.linear:build",
        args={},
        steps=4,
        checkpoint={"every_steps": 2, "keep_last": 2},
    )
    saving["allowed_workload_prefixes"] = ["trainer.examples"]
    assert run_in_process(saving)[0].exit_code == 0
    saved = snapshot(root)
    trainer = {**saving["trainer"], "learning_rate": 0.001, "grad_checkpointing": True}
    resuming = {**saving, "trainer": trainer, "job_id": JOB}

    with pytest.raises(ConfigError, match=r"trainer\.learning_rate changed"):
        run_in_process(resuming)

    plane.then = answer("go")
    standby = {**resuming, "standby": True, "attempt_id": ATTEMPT, "api_url": plane.url}
    with pytest.raises(ConfigError, match="does not support grad_checkpointing"):
        run_in_process(standby, environ={ENV_JOB_TOKEN: TOKEN})
    assert plane.calls == []
    assert snapshot(root) == saved


def test_a_standby_without_api_url_exits_78(tmp_path: Path) -> None:
    cfg = standby_config(str(tmp_path / "ckpt"), None)
    run = TrainerProcess(cfg, tmp_path / "run", env={ENV_JOB_TOKEN: TOKEN})
    assert run.wait() == EXIT_CONFIG_ERROR
    assert "standby" in run.stderr() and "api_url" in run.stderr()


def test_a_gang_waits_and_goes_together(tmp_path: Path, plane: ControlPlane) -> None:
    plane.script = [WAIT, UNAVAILABLE, WAIT, WAIT]
    plane.then = answer("go")
    cfg = standby_config(str(tmp_path / "ckpt"), plane.url, steps=6)
    gang = TrainerProcess(cfg, tmp_path / "gang", nproc=2, env={ENV_JOB_TOKEN: TOKEN})
    assert gang.wait() == 0, gang.stderr()
    assert gang.events("done")[0]["step"] == 6
    # Rank 0 asks for the gang: one call per round, none after the go (two ranks asking would
    # have made an even number of calls).
    assert len(plane.calls) == 5
    assert_asked_as_the_attempt(plane.calls)
