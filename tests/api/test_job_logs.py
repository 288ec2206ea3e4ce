"""GET /v1/jobs/{id}/logs reads a log a bounded chunk at a time: `tail` starts at its end, and a
follower reads only what was written since its last pass (it re-read the whole log every
second, issue 22)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from api.app import create_app
from api.database import transaction
from api.jobs import lifecycle
from api.logs.reader import LogChunk
from api.models import Job, JobAttempt, utcnow
from api.settings import Settings
from gpujobs.resources import JobStatus
from tests.conftest import job_body
from worker.launchers.local import LocalLauncher

TIMEOUT = 30.0


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Recorded:
    """The launcher's own reader, and every chunk it handed out."""

    def __init__(self, launcher: LocalLauncher) -> None:
        self.launcher = launcher
        self.chunks: list[LogChunk] = []

    def __call__(self, handle: str, *, offset: int = 0) -> Iterator[LogChunk]:
        for chunk in self.launcher.read_log(handle, offset=offset):
            self.chunks.append(chunk)
            yield chunk

    def read(self) -> int:
        return sum(len(chunk.data) for chunk in self.chunks)


def start_attempt(factory: sessionmaker[Session], job_id: str, root: Path, log: bytes) -> str:
    """The job's attempt 1, running on the local launcher under `root`, with `log` so far."""
    attempt_id = f"att-{job_id[:8]}"
    (root / attempt_id).mkdir(parents=True)
    (root / attempt_id / "trainer.log").write_bytes(log)
    with transaction(factory) as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.add(
            JobAttempt(
                id=attempt_id, job_id=job.id, team_id=job.team_id, number=1, cloud="aws",
                region="us-east-1", zone="use1-az1", instance_type="g4dn.xlarge",
                gpu_model="T4", gpu_count=1, capacity_type="on_demand", nodes=1,
                price_per_hour=0.526, on_demand_price_per_hour=0.526,
                launch_handle=f"local:{attempt_id}", started_at=utcnow(),
            )
        )  # fmt: skip
        job.attempts_count = 1
        for status in (JobStatus.SCHEDULED, JobStatus.RUNNING):
            lifecycle.switch_status(session, job, status, reason="test")
    return attempt_id


def finish_attempt(factory: sessionmaker[Session], job_id: str, attempt_id: str) -> None:
    with transaction(factory) as session:
        attempt = session.get(JobAttempt, attempt_id)
        job = session.get(Job, job_id)
        assert attempt is not None and job is not None
        attempt.ended_at = utcnow()
        attempt.end_reason = "succeeded"
        lifecycle.switch_status(session, job, JobStatus.SUCCEEDED, reason="test")


@pytest.fixture
def recorded(tmp_path: Path) -> Recorded:
    return Recorded(LocalLauncher(root=tmp_path / "attempts"))


@pytest.fixture
def logs_client(
    settings: Settings, session_factory: sessionmaker[Session], recorded: Recorded
) -> Iterator[TestClient]:
    app = create_app(
        settings, session_factory=session_factory, nudge=lambda *_: None, logs=recorded
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def submit(client: TestClient, auth: dict[str, str]) -> str:
    response = client.post("/v1/jobs", json=job_body("logged"), headers=auth)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_follower_reads_each_byte_of_a_growing_log_once(
    logs_client: TestClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    recorded: Recorded,
) -> None:
    # A character split between two polls ("✓" is e2 9c 93) reaches the reader whole.
    first = b"step 1 loss 2.0\n" * 10_000 + b"\xe2\x9c"
    second = b"\x93 resumed\n" + b"step 2 loss 1.5\n" * 10_000
    job_id = submit(logs_client, auth)
    attempt_id = start_attempt(session_factory, job_id, recorded.launcher.root, first)
    log = recorded.launcher.root / attempt_id / "trainer.log"

    def trainer() -> None:
        wait_for(lambda: recorded.read() == len(first), "the follower's first pass")
        with open(log, "ab") as out:
            out.write(second)
        wait_for(lambda: recorded.read() == len(first + second), "the follower to read more")
        finish_attempt(session_factory, job_id, attempt_id)

    writer = threading.Thread(target=trainer, daemon=True)
    writer.start()
    response = logs_client.get(f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=auth)
    writer.join(TIMEOUT)

    assert response.status_code == 200
    header, text = response.text.split("\n", 1)
    assert header.startswith("=== attempt 1: on-demand g4dn.xlarge")
    assert text == (first + second).decode()
    # Each byte was read once: every read started where the one before it ended.
    starts = [chunk.start for chunk in recorded.chunks]
    ends = [chunk.start + len(chunk.data) for chunk in recorded.chunks]
    assert starts == [0, *ends[:-1]]
    assert ends[-1] == len(first + second)


def test_a_standbys_output_beside_the_running_attempts_comes_under_its_own_header(
    logs_client: TestClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    recorded: Recorded,
) -> None:
    """While a standby waits beside the running attempt, a follower reads both as they write:
    every stretch of output comes under the header of the attempt that wrote it (they
    interleaved under the first header, and the CLI's --json tagged lines with the wrong
    attempt). A stretch that stops mid-line ends its line before the next header."""
    job_id = submit(logs_client, auth)
    running = start_attempt(session_factory, job_id, recorded.launcher.root, b"step 1\n")
    standby = f"att-{job_id[:8]}-standby"
    (recorded.launcher.root / standby).mkdir()
    (recorded.launcher.root / standby / "trainer.log").write_bytes(b"restoring")
    with transaction(session_factory) as session:
        first = session.get(JobAttempt, running)
        assert first is not None
        session.add(
            JobAttempt(
                id=standby, job_id=job_id, team_id=first.team_id, number=2, cloud="aws",
                region="us-east-1", zone="use1-az2", instance_type="g4dn.xlarge",
                gpu_model="T4", gpu_count=1, capacity_type="spot", nodes=1,
                price_per_hour=0.158, on_demand_price_per_hour=0.526, standby=True,
                launch_handle=f"local:{standby}", started_at=utcnow(),
            )
        )  # fmt: skip
    written = {running: b"step 1\n", standby: b"restoring"}

    def write(attempt: str, data: bytes) -> None:
        written[attempt] += data
        with open(recorded.launcher.root / attempt / "trainer.log", "ab") as out:
            out.write(data)

    def trainers() -> None:
        for n in range(2, 5):
            total = sum(len(w) for w in written.values())
            wait_for(lambda total=total: recorded.read() >= total, "the follower to read both")
            write(running, f"step {n}\n".encode())
            write(standby, f" {n}\nwaiting".encode())
        total = sum(len(w) for w in written.values())
        wait_for(lambda: recorded.read() >= total, "the follower to read the last of both")
        with transaction(session_factory) as session:
            for attempt_id in (standby, running):
                attempt = session.get(JobAttempt, attempt_id)
                assert attempt is not None
                attempt.ended_at, attempt.end_reason = utcnow(), "succeeded"
            job = session.get(Job, job_id)
            assert job is not None
            lifecycle.switch_status(session, job, JobStatus.SUCCEEDED, reason="test")

    writer = threading.Thread(target=trainers, daemon=True)
    writer.start()
    response = logs_client.get(f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=auth)
    writer.join(TIMEOUT)

    assert response.status_code == 200
    under: dict[str, list[str]] = {}
    headers = []
    for line in response.text.splitlines():
        if line.startswith("=== attempt "):
            headers.append(line)
            current = under.setdefault(line.split(":")[0], [])
        else:
            current.append(line)
    assert len(headers) > 2  # the stream went back and forth between them
    assert "\n".join(under["=== attempt 1"]) + "\n" == written[running].decode()
    # the standby's stretches stop mid-line ("waiting"): each was ended before the next header
    # (else that header would not start a line), and nothing else was added to its output
    standby_lines = "\n".join(under["=== attempt 2"])
    assert standby_lines.replace("\n", "") == written[standby].decode().replace("\n", "")


def test_tail_starts_each_attempt_that_many_bytes_before_its_end(
    logs_client: TestClient,
    auth: dict[str, str],
    session_factory: sessionmaker[Session],
    recorded: Recorded,
) -> None:
    lines = b"".join(f"step {n}\n".encode() for n in range(100_000))
    job_id = submit(logs_client, auth)
    attempt_id = start_attempt(session_factory, job_id, recorded.launcher.root, lines)
    finish_attempt(session_factory, job_id, attempt_id)

    response = logs_client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 22}, headers=auth)

    assert response.status_code == 200
    assert response.text.split("\n", 1)[1] == "step 99998\nstep 99999\n"
    assert recorded.read() == 22  # the rest was never read
    whole = logs_client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 10**12}, headers=auth)
    assert whole.text.split("\n", 1)[1] == lines.decode()


@pytest.mark.parametrize("tail", ["0", "-5", "ten", "1.5"])
def test_a_bad_tail_is_a_422_naming_it(client: TestClient, auth: dict[str, str], tail: str) -> None:
    job_id = submit(client, auth)

    response = client.get(f"/v1/jobs/{job_id}/logs", params={"tail": tail}, headers=auth)

    assert response.status_code == 422, response.text
    assert [f["field"] for f in response.json()["error"]["fields"]] == ["tail"]


def test_tail_is_in_the_openapi_document(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/jobs/{job_id}/logs"]["get"]
    [tail] = [p for p in operation["parameters"] if p["name"] == "tail"]
    assert tail["in"] == "query" and "bytes" in tail["description"]
    assert tail["schema"]["anyOf"][0] == {"type": "integer", "minimum": 1}
