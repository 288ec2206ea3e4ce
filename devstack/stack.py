"""The whole service as real processes: PostgreSQL, Redis, SeaweedFS, the API, a Celery worker
and beat, with the local launcher and its simulated spot market."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from devstack.confinement import trainer_python, trainer_python_path
from devstack.ports import free_port, wait_for
from devstack.s3server import S3Server
from gpujobs.checkpoints import job_checkpoint_uri

ROOT = Path(__file__).resolve().parents[1]
# The machine's shared PostgreSQL; a stack that restarts its database passes its own cluster's.
DEFAULT_PG_ADMIN_URL = os.environ.get(
    "GPUJOBS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)

__all__ = ["ROOT", "Redis", "Stack", "free_port", "wait_for"]


class Redis:
    """A dedicated redis-server, so a test can restart it without touching anyone else's."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise AssertionError("redis-server is not installed; `make test` installs it")
        self.process = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for(self._answers, timeout=20, what="redis")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None


@dataclass
class Stack:
    tmp: Path
    s3: S3Server
    trace: dict[str, Any]
    time_scale: float = 1.0
    extra_env: dict[str, str] = field(default_factory=dict)
    pg_admin_url: str = DEFAULT_PG_ADMIN_URL
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Restarts of a process that exited on its own, as compose's `restart: unless-stopped` or a
    # Kubernetes Deployment would do.
    restarts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.redis = Redis(self.tmp)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.home = self.tmp / "home"
        self.bucket = "gpujobs-e2e"
        self.database = f"gpujobs_e2e_{uuid.uuid4().hex[:8]}"
        self.checkpoint_root = f"s3://{self.bucket}/{self.database}"
        self.token = ""
        self.commands: dict[str, list[str]] = {}
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    # Lifecycle ----------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        trace_file = self.tmp / "trace.json"
        trace_file.write_text(json.dumps(self.trace))
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
        env.update(self.s3.env())
        env.update(
            GPUJOBS_HOME=str(self.home),
            GPUJOBS_DATABASE_URL=self.pg_admin_url.rsplit("/", 1)[0] + "/" + self.database,
            GPUJOBS_BROKER_URL=self.redis.url,
            GPUJOBS_PORT=str(self.port),
            GPUJOBS_CHECKPOINT_URI=self.checkpoint_root,
            GPUJOBS_S3_ENDPOINT_URL=self.s3.endpoint_url,
            GPUJOBS_SCHEDULE_INTERVAL_S="1",
            GPUJOBS_RECONCILE_INTERVAL_S="0.5",
            GPUJOBS_SPOT_MARKET="trace",
            GPUJOBS_SPOT_TRACE=str(trace_file),
            GPUJOBS_SPOT_TRACE_TIME_SCALE=str(self.time_scale),
            GPUJOBS_SPOT_NOTICE_S="20",
            GPUJOBS_CREDENTIALS_FILE=str(self.tmp / "credentials.json"),
            # Trainers get S3 keys of their own attempt's, minted through SeaweedFS's IAM API
            # and limited to their job's prefix (docs/security.md), and an interpreter they
            # can run.
            GPUJOBS_STORAGE_CREDENTIALS="iam_users",
            GPUJOBS_TRAINER_PYTHON=trainer_python(),
            GPUJOBS_TRAINER_PYTHON_PATH=trainer_python_path(),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        self.redis.start()
        self.s3.create_bucket(self.bucket)
        admin = create_engine(self.pg_admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{self.database}"'))
        admin.dispose()
        env = self.env()
        self.token = subprocess.run(
            [sys.executable, "-m", "api.admin", "create-team", "e2e"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        self.start_api()
        self.start_worker()
        self.start_beat()

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - kept open for the process
        self.processes[name] = subprocess.Popen(
            command, cwd=ROOT, env=self.env(), stdout=log, stderr=subprocess.STDOUT
        )
        self.commands[name] = command
        if self._supervisor is None:
            self._supervisor = threading.Thread(target=self._supervise, daemon=True)
            self._supervisor.start()

    def _supervise(self) -> None:
        while not self._stopping.wait(0.5):
            for name, process in list(self.processes.items()):
                if process.poll() is not None and self.processes.get(name) is process:
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    self._spawn(name, self.commands[name])

    def start_api(self) -> None:
        command = [sys.executable, "-m", "worker.api_app", "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning"]  # fmt: skip
        self._spawn("api", command)
        wait_for(self._ready, timeout=60, what="the API")

    def start_worker(self) -> None:
        command = [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker",
                   "--pool=threads", "--concurrency=2", "--loglevel=INFO",
                   "--without-heartbeat", "--without-gossip", "--without-mingle"]  # fmt: skip
        self._spawn("worker", command)

    def start_beat(self) -> None:
        command = [sys.executable, "-m", "celery", "-A", "worker.celery_app", "beat",
                   "--loglevel=INFO", f"--schedule={self.tmp / 'beat-schedule'}"]  # fmt: skip
        self._spawn("beat", command)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes.pop(name)
        process.send_signal(sig)
        process.wait(timeout=30)

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        for name in list(self.processes):
            process = self.processes.pop(name)
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self._stop_trainers()
        self.redis.stop()
        admin = create_engine(self.pg_admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)'))
        admin.dispose()

    def _stop_trainers(self) -> None:
        """Trainer process groups outlive the worker by design; the test must not leak them."""
        for pid_file in (self.home / "attempts").glob("*/pid"):
            pid = json.loads(pid_file.read_text())["pid"]
            if pid is None:
                continue  # it ended before its launch was recorded
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # The API, as a user sees it -------------------------------------------------------------

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=10
        )

    def submit(self, spec: dict[str, Any]) -> str:
        with self.client() as client:
            response = client.post("/v1/jobs", json=spec)
            assert response.status_code == 201, response.text
            return str(response.json()["id"])

    def checkpoint_uri(self, job_id: str) -> str:
        """Where the job's trainer writes its checkpoints."""
        return job_checkpoint_uri(self.checkpoint_root, job_id)

    def job(self, job_id: str) -> dict[str, Any]:
        with self.client() as client:
            job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
            return job

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        with self.client() as client:
            rows: list[dict[str, Any]] = client.get(f"/v1/jobs/{job_id}/attempts").json()
            return rows

    def events(self, job_id: str) -> list[dict[str, Any]]:
        with self.client() as client:
            rows: list[dict[str, Any]] = client.get(f"/v1/jobs/{job_id}/events").json()
            return rows

    def wait_status(self, job_id: str, statuses: set[str], *, timeout: float) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in statuses else None

        try:
            job: dict[str, Any] = wait_for(
                reached, timeout=timeout, what=f"job {job_id} to reach {statuses}"
            )
            return job
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.diagnostics(job_id)}") from None

    def diagnostics(self, job_id: str) -> str:
        trainer_logs = "\n".join(
            f"--- {p.parent.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted((self.home / "attempts").glob("*/trainer.log"))
        )
        return (
            f"restarted processes: {self.restarts}\n"
            f"job: {json.dumps(self.job(job_id))[:2000]}\n"
            f"events: {[(e['to_status'], e['reason']) for e in self.events(job_id)]}\n"
            f"attempts: {json.dumps(self.attempts(job_id))[:3000]}\n"
            f"worker log tail:\n{self.log('worker')[-4000:]}\n"
            f"trainer logs:\n{trainer_logs}"
        )
