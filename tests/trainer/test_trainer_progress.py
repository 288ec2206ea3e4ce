"""Progress: JSON lines on stdout, and ProgressReports posted to the API in the background."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from gpujobs.resources import ProgressReport
from gpujobs.runtime import ENV_JOB_TOKEN
from tests.trainer.trainer_runs import TrainerProcess, free_port, run_config, run_in_process
from trainer.progress import ProgressLog, Publisher


class Recorder(BaseHTTPRequestHandler):
    received: list[tuple[str, str, dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Authorization"], json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[tuple[str, list]]:
    Recorder.received = []
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", Recorder.received
    server.shutdown()
    server.server_close()


def test_progress_lines_and_reports(tmp_path: Path, api: tuple[str, list]) -> None:
    url, received = api
    config = {**run_config(str(tmp_path / "ckpt"), steps=12), "api_url": url, "job_id": "job-7"}
    config["progress_every_s"] = 0.05
    result, records = run_in_process(config, environ={ENV_JOB_TOKEN: "secret"})
    assert result.exit_code == 0
    events = [r["event"] for r in records if "event" in r]
    assert events[0] == "start" and events[-1] == "done" and "checkpoint" in events
    last = [r for r in records if "event" not in r][-1]
    assert last["step"] == 12 and last["total_steps"] == 12
    assert {"loss", "samples_per_s", "data_wait_fraction", "checkpoint_stall_s"} <= last.keys()
    assert received, "at least the final report is posted"
    path, auth, body = received[-1]
    assert path == "/v1/jobs/job-7/progress" and auth == "Bearer secret"
    assert ProgressReport.model_validate(body).step == 12


def test_an_unreachable_api_never_stops_training(tmp_path: Path) -> None:
    config = {**run_config(str(tmp_path / "ckpt"), steps=5)}
    config["api_url"] = f"http://127.0.0.1:{free_port()}"
    config["progress_every_s"] = 0.01
    result, _ = run_in_process(config, environ={ENV_JOB_TOKEN: "t"})
    assert result.exit_code == 0 and result.step == 5


def test_the_log_is_not_the_trainers_own_reporting(tmp_path: Path, api: tuple[str, list]) -> None:
    url, received = api
    config = {**run_config(str(tmp_path / "ckpt"), steps=8), "api_url": url, "job_id": "job-8"}
    config["progress_every_s"] = 0.01
    run = TrainerProcess(config, tmp_path / "run", env={ENV_JOB_TOKEN: "secret"})
    assert run.wait() == 0
    assert received, "reports were posted"
    assert "HTTP Request" not in run.stderr() and "httpx" not in run.stderr()


def test_a_checkpoints_report_carries_its_window_at_the_same_time() -> None:
    """The server's rate counts each window once, by when it was measured: the report sent as a
    checkpoint completes is the last window again, so it keeps that window's time; the next
    window is measured later."""
    lines = io.StringIO()
    publisher = Publisher(
        progress=ProgressLog(enabled=True, stream=lines), reporter=None, samples_per_step=8,
        every_s=0.0, attempt_id="a-1", enabled=True,
    )  # fmt: skip
    figures = {"total_steps": 10, "loss": 1.0, "data_wait_s": 0.0}
    publisher.stepped()
    publisher.publish(step=1, checkpoint_step=None, **figures)
    first = publisher.last
    publisher.publish_checkpoint(1)
    again = publisher.last
    time.sleep(0.01)  # a window lasts seconds
    publisher.stepped()
    publisher.publish(step=2, checkpoint_step=1, **figures)
    second = publisher.last
    assert first is not None and again is not None and second is not None
    assert first.measured_at is not None and first.measured_at.tzinfo is not None
    assert again.checkpoint_step == 1 and again.measured_at == first.measured_at
    assert second.measured_at is not None and second.measured_at > first.measured_at
    # The lines on stdout keep their own time for reading, not the server's field.
    records = [json.loads(line) for line in lines.getvalue().splitlines()]
    # The checkpoint's report goes to the API alone: the log has each step's line once.
    assert [r["step"] for r in records] == [1, 2]
    assert all("measured_at" not in r and "time" in r for r in records)
