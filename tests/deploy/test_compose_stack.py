"""The compose deployment, for real: images built from docker/, `docker-compose up`, the first team
made with the documented command, jobs submitted with the `gpujobs` CLI.

Needs a Docker engine and the local base images (`make test` starts and builds them:
scripts/docker-engine.sh, scripts/docker-base-images.sh). One stack per module, with a generated
project name and env file; it is always removed with its volumes (`down -v`) at the end. The
scenarios run in file order on that stack:

0. 100 slow clients and idle connections hold the API through its published port: another
   team's requests are answered, and the api closes them within its own timeouts;
1. a small job checkpoints to the compose S3 and succeeds; `down` then `up` keeps it;
2. `docker-compose stop worker` drains a running trainer (checkpoint) and the job resumes after
   `up` without spending a restart;
3. with the spot market on, a job is preempted, resumes and succeeds.

Durations depend on the machine's load, so every wait is generous and no timing is asserted.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests import slow_clients
from tests.deploy.support import REPO

pytestmark = [pytest.mark.compose, pytest.mark.timeout(3600)]

TINY_GPT = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "corpus_bytes": 50_000}
BATCH = 4
BUCKET = "gpujobs"
# The spot trace the worker replays in scenario 3: spot for 4 ticks, gone for 1, and again. A
# spot window must outlast a trainer's start (importing torch, restoring) on a loaded machine by
# enough for real progress.
TRACE_TICK_S = 12.0
TRACE_PATTERN = [1, 1, 1, 1, 0]
LOCAL_IMAGES = {
    "PYTHON_IMAGE": "local/python:3.11-bookworm",
    "POSTGRES_IMAGE": "local/postgres:15",
    "REDIS_IMAGE": "local/redis:7",
    "SEAWEEDFS_IMAGE": "local/seaweedfs:4.48",
}
PROJECT_IMAGES = ("API_IMAGE", "WORKER_IMAGE")
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
PROJECT_LABEL = "com.docker.compose.project"


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Compose:
    """One compose project: `docker-compose -p NAME -f ... --env-file FILE`, generated here."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.project = f"gpujobs-test-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.env_file = directory / "compose.env"
        self.override = directory / "compose.override.yml"
        self.trace = directory / "spot-trace.json"
        self.env: dict[str, str] = {
            **{key: os.environ.get(key, default) for key, default in LOCAL_IMAGES.items()},
            # Tags of their own keep a run apart from other builds on a shared Docker engine
            # (scripts/docker-images.sh reads the same names).
            **{key: os.environ[key] for key in PROJECT_IMAGES if key in os.environ},
            "API_PORT": str(self.port),
            "POSTGRES_PASSWORD": secrets.token_hex(12),
            "S3_ACCESS_KEY": "gpujobs-test",
            "S3_SECRET_KEY": secrets.token_hex(16),
            "S3_BUCKET": BUCKET,
            "GPUJOBS_SPOT_NOTICE_S": "30",
            "GPUJOBS_SPOT_MARKET": "off",
        }
        self.trace.write_text(
            json.dumps(
                {
                    "metadata": {"gap_seconds": TRACE_TICK_S * 60.0},
                    "data": TRACE_PATTERN * 2000,
                }
            )
        )
        self.trace.chmod(0o644)
        # The trace file the spot market reads, mounted into the worker (read-only).
        self.override.write_text(
            yaml.safe_dump(
                {
                    "services": {
                        "worker": {"volumes": [f"{self.trace}:/etc/gpujobs/spot-trace.json:ro"]}
                    }
                }
            )
        )
        self.write_env()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_env(self, **changes: str) -> None:
        self.env.update(changes)
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in self.env.items()))

    def run(
        self, *args: str, timeout: float = 900, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [
            "docker-compose",
            "-p",
            self.project,
            "-f",
            str(REPO / "docker-compose.yml"),
            "-f",
            str(self.override),
            "--env-file",
            str(self.env_file),
            *args,
        ]
        result = subprocess.run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
            env=self.shell_env(),
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n"
                f"{result.stderr[-3000:]}"
            )
        return result

    def shell_env(self) -> dict[str, str]:
        """The shell's environment minus anything compose would interpolate: only the generated
        env file configures this project (a developer's GPUJOBS_ADMIN_TOKEN must not leak in)."""
        example = (REPO / ".env.example").read_text()
        compose_vars = set(re.findall(r"^(?:#\s*)?([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
        return {
            key: value
            for key, value in os.environ.items()
            if key not in self.env and key not in compose_vars and not key.startswith("GPUJOBS_")
        }

    def up(self) -> None:
        self.run("up", "-d", "--no-build")
        self.wait_ready()

    def wait_ready(self) -> None:
        def ready() -> bool:
            try:
                return httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_for(ready, timeout=600, what=f"{self.url}/readyz")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.logs()}") from None

    def exec(self, service: str, *command: str, timeout: float = 300) -> str:
        return self.run("exec", "-T", service, *command, timeout=timeout).stdout

    def logs(self, *services: str, tail: int = 60) -> str:
        result = self.run("logs", "--no-color", f"--tail={tail}", *services, check=False)
        return result.stdout[-8000:] + result.stderr[-2000:]

    def ps(self) -> str:
        return self.run("ps", check=False).stdout

    def s3_objects(self, prefix: str) -> list[str]:
        """The checkpoint store's keys under `prefix`, listed inside the compose network."""
        script = (
            "import os, boto3\n"
            "s3 = boto3.client('s3', endpoint_url=os.environ['GPUJOBS_S3_ENDPOINT_URL'])\n"
            f"pages = s3.get_paginator('list_objects_v2').paginate(Bucket={BUCKET!r}, "
            f"Prefix={prefix!r})\n"
            "for page in pages:\n"
            "    for item in page.get('Contents', []):\n"
            "        print(item['Key'])\n"
        )
        return self.exec("api", "python", "-c", script).split()

    def trainer_s3_keys(self) -> list[tuple[str, str]]:
        """The S3 keys in the environments of the trainers running in the worker container (the
        processes holding a job token; the worker's own keys are in its environment too)."""
        script = (
            "import glob, json\n"
            "found = set()\n"
            "for path in glob.glob('/proc/[0-9]*/environ'):\n"
            "    try:\n"
            "        raw = open(path, 'rb').read().decode(errors='replace')\n"
            "    except OSError:\n"
            "        continue\n"
            "    env = dict(v.split('=', 1) for v in raw.split('\\0') if '=' in v)\n"
            "    if 'GPUJOBS_JOB_TOKEN' in env and 'AWS_ACCESS_KEY_ID' in env:\n"
            "        found.add((env['AWS_ACCESS_KEY_ID'], env['AWS_SECRET_ACCESS_KEY']))\n"
            "print(json.dumps(sorted(found)))\n"
        )
        return [tuple(keys) for keys in json.loads(self.exec("worker", "python", "-c", script))]

    def s3_outcomes(self, keys: tuple[str, str], calls: dict[str, str]) -> dict[str, str]:
        """Each call (a boto3 S3 client method's call, as text, on `s3`) made with `keys` inside
        the compose network: `ok`, or the S3 error code."""
        script = (
            "import json, os, sys, boto3\n"
            "from botocore.config import Config\n"
            "s3 = boto3.client('s3', endpoint_url=os.environ['GPUJOBS_S3_ENDPOINT_URL'],\n"
            "    aws_access_key_id=sys.argv[1], aws_secret_access_key=sys.argv[2],\n"
            "    config=Config(s3={'addressing_style': 'path'}, retries={'max_attempts': 1}))\n"
            "out = {}\n"
            "for name, call in json.loads(sys.argv[3]).items():\n"
            "    try:\n"
            "        eval(call)\n"
            "        out[name] = 'ok'\n"
            "    except Exception as error:\n"
            "        answer = getattr(error, 'response', {}).get('Error', {})\n"
            "        out[name] = answer.get('Code', repr(error))\n"
            "print(json.dumps(out))\n"
        )
        output = self.exec("api", "python", "-c", script, *keys, json.dumps(calls))
        outcomes: dict[str, str] = json.loads(output)
        return outcomes


class Cli:
    """The `gpujobs` command of this venv, pointed at the compose API."""

    def __init__(self, url: str, token: str, directory: Path) -> None:
        self.url, self.token, self.directory = url, token, directory
        binary = shutil.which("gpujobs", path=str(Path(sys.executable).parent))
        assert binary, "the gpujobs CLI is installed with the project (pip install -e .)"
        self.binary: str = binary

    def text(self, *args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
        env["HOME"] = str(self.directory)  # no credentials file of the developer's
        result = subprocess.run(
            [self.binary, *args, "--url", self.url, "--token", self.token],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert result.returncode == 0, f"gpujobs {' '.join(args)}: {result.stderr}"
        return result.stdout

    def __call__(self, *args: str) -> Any:
        return json.loads(self.text(*args, "--json"))

    def submit(self, spec: dict[str, Any]) -> str:
        path = self.directory / f"{spec['name']}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return str(self("submit", str(path))["id"])

    def show(self, job_id: str) -> dict[str, Any]:
        return dict(self("show", job_id))


def spec(name: str, steps: int, *, capacity: list[str] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "trainer": {
            "workload": "gpt",
            "steps": steps,
            "batch_size": BATCH,
            "amp": "off",
            "seed": 3,
            "dataloader": {"num_workers": 0},
            "checkpoint": {"every_steps": 10},
            "args": TINY_GPT,
        },
        "capacity": {"types": capacity or ["on_demand"]},
        "deadline_hours": 6,
        "estimated_hours": 0.02,
    }


class Stack:
    def __init__(self, compose: Compose, cli: Cli) -> None:
        self.compose, self.cli = compose, cli
        self.steps_per_s: float | None = None  # the trainer's speed here, measured in scenario 1

    def job(self, job_id: str) -> dict[str, Any]:
        with httpx.Client(
            base_url=self.compose.url,
            headers={"Authorization": f"Bearer {self.cli.token}"},
            timeout=30,
        ) as client:
            response = client.get(f"/v1/jobs/{job_id}")
            response.raise_for_status()
            job: dict[str, Any] = response.json()
        progress = job.get("progress") or {}
        if progress.get("samples_per_s"):
            rate = float(progress["samples_per_s"]) / BATCH
            self.steps_per_s = max(self.steps_per_s or 0.0, rate)
        return job

    def wait(self, job_id: str, what: Callable[[dict[str, Any]], bool], *, timeout: float) -> Any:
        def check() -> dict[str, Any] | None:
            try:
                job = self.job(job_id)
            except httpx.HTTPError:
                return None  # the API restarting
            return job if what(job) else None

        try:
            return wait_for(check, timeout=timeout, what=f"job {job_id}")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.diagnostics(job_id)}") from None

    def finished(self, job_id: str, *, timeout: float = 900) -> dict[str, Any]:
        self.wait(job_id, lambda job: job["status"] in TERMINAL, timeout=timeout)
        return self.cli.show(job_id)

    def diagnostics(self, job_id: str) -> str:
        try:
            shown = json.dumps(self.cli.show(job_id))[:4000]
        except AssertionError as error:
            shown = str(error)
        return f"{shown}\n{self.compose.ps()}\n{self.compose.logs('worker', 'api', tail=80)}"

    def measure_speed(self, job_id: str) -> None:
        """Training steps per second here, from the trainer's own log lines (first step to done),
        read through the API's logs endpoint with the CLI."""
        events = {}
        for line in self.cli.text("logs", job_id, "--json").splitlines():  # the raw lines
            try:
                record = json.loads(json.loads(line)["line"])
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") in ("first_step", "done"):
                events[record["event"]] = record
        first, done = events.get("first_step"), events.get("done")
        assert first and done, "the trainer's log reaches the API through the worker's volume"
        seconds = float(done["time"]) - float(first["time"])
        if seconds > 0 and done["step"] > first["step"]:
            rate = (done["step"] - first["step"]) / seconds
            self.steps_per_s = max(self.steps_per_s or 0.0, rate)

    def sized_steps(self, seconds: float, *, at_least: int) -> int:
        """Steps that keep the trainer busy for about `seconds` at the speed measured here."""
        if self.steps_per_s is None:
            return at_least
        return max(at_least, int(math.ceil(self.steps_per_s * seconds / 10.0)) * 10)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if (
        shutil.which("docker-compose") is None
        or subprocess.run(["docker", "info"], capture_output=True).returncode
    ):
        pytest.fail(
            "needs a Docker engine and docker-compose: `make test` installs and starts them "
            "(scripts/system-deps.sh, scripts/docker-engine.sh, scripts/docker-base-images.sh)"
        )
    started = time.monotonic()
    python_image = os.environ.get("PYTHON_IMAGE", LOCAL_IMAGES["PYTHON_IMAGE"])
    if python_image == LOCAL_IMAGES["PYTHON_IMAGE"]:  # built here, once (a no-op when present)
        bases = subprocess.run(
            ["bash", str(REPO / "scripts/docker-base-images.sh")],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert bases.returncode == 0, bases.stdout[-3000:] + bases.stderr[-3000:]
    # Sizes go to a scratch file: the committed results change only when measured on purpose.
    sizes_file = tmp_path_factory.mktemp("images") / "images.json"
    result = subprocess.run(
        ["bash", str(REPO / "scripts/docker-images.sh")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=3000,
        env={**os.environ, "PYTHON_IMAGE": python_image, "IMAGE_SIZES_JSON": str(sizes_file)},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sizes = json.loads(sizes_file.read_text())
    print(f"images built in {time.monotonic() - started:.0f} s: {result.stdout.strip()}")
    return dict(sizes)


@pytest.fixture(scope="module")
def stack(built: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    directory = tmp_path_factory.mktemp("compose")
    compose = Compose(directory)
    started = time.monotonic()
    try:
        compose.up()
        print(f"compose up to /readyz in {time.monotonic() - started:.0f} s")
        # The documented first-team command; it prints the token once.
        token = compose.exec("api", "python", "-m", "api.admin", "create-team", "acme").strip()
        assert token and "\n" not in token, token
        yield Stack(compose, Cli(compose.url, token, directory))
    finally:
        compose.run("down", "-v", "--remove-orphans", "-t", "30", check=False, timeout=600)
        leftover = subprocess.run(
            [
                "docker",
                "volume",
                "ls",
                "-q",
                "--filter",
                f"label=com.docker.compose.project={compose.project}",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        assert not leftover, f"down -v left volumes: {leftover}"


def test_images_are_lean_and_torch_is_pinned(built: dict[str, Any]) -> None:
    images = built["images"]
    api = images[os.environ.get("API_IMAGE", "gpujobs-api:dev")]
    worker = images[os.environ.get("WORKER_IMAGE", "gpujobs-worker:dev")]
    trainer = images[os.environ.get("TRAINER_IMAGE", "gpujobs-trainer:cpu")]
    # No torch in the api image; CPU torch (not a multi-GB CUDA build) in the others.
    assert api["size_bytes"] < 1.0 * 2**30, api
    assert worker["size_bytes"] < 2.5 * 2**30, worker
    assert trainer["size_bytes"] < 2.0 * 2**30, trainer
    assert trainer["labels"].get("org.gpujobs.torch-variant") == "cpu"
    for image in ("gpujobs-worker:dev", "gpujobs-trainer:cpu"):
        version = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python", image,
             "-c", "import torch; print(torch.__version__)"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert version.stdout.strip() == "2.13.0+cpu", (image, version.stderr)


def test_the_admin_token_is_generated_once_and_kept(stack: Stack) -> None:
    compose = stack.compose
    token = compose.exec("api", "cat", "/var/lib/gpujobs-secrets/admin-token").strip()
    assert len(token) >= 32
    # Nothing in the compose configuration carries it; the API accepts it as the admin token.
    assert token not in compose.run("config").stdout
    response = httpx.get(
        f"{compose.url}/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert response.status_code == 200, response.text
    wrong = httpx.get(
        f"{compose.url}/v1/jobs", headers={"Authorization": "Bearer not-the-token"}, timeout=30
    )
    assert wrong.status_code == 401


@dataclass(frozen=True)
class Team:
    url: str
    token: str


def test_slow_and_idle_clients_do_not_stop_another_teams_requests(stack: Stack) -> None:
    """The embedded service's attack (tests/api/test_slow_clients.py), through the port compose
    publishes, against the api container as it ships: its own timeouts, nothing in front."""
    compose = stack.compose
    limits = json.loads(
        compose.exec(
            "api",
            "python",
            "-c",
            "import json; from api.settings import get_settings; s = get_settings(); "
            "print(json.dumps([s.api_header_timeout_s, s.api_body_timeout_s]))",
        )
    )
    token = compose.exec("api", "python", "-m", "api.admin", "create-team", "slowpoke").strip()
    attacker = Team(compose.url, token)
    victim = {"Authorization": f"Bearer {stack.cli.token}"}
    held = slow_clients.hold(attacker)
    try:
        # Another team's requests, and the health checks, are answered while every one is held.
        with httpx.Client(base_url=compose.url, timeout=30) as client:
            health = client.get("/healthz")
            assert health.status_code == 200, f"{health.text}\n{compose.logs('api', tail=20)}"
            assert client.get("/readyz").status_code == 200
            listed = client.get("/v1/jobs", headers=victim)
            assert listed.status_code == 200, listed.text
            budget = client.get("/v1/budget", headers=victim)
            assert budget.status_code == 200, budget.text
        # And the api closes each within its timeouts (the deadline is well past them).
        outcomes = slow_clients.how_closed(held, within_s=max(limits) + 30)
        assert outcomes == slow_clients.CLOSED_AS, f"{outcomes}\n{compose.logs('api')}"
        attackers_jobs = httpx.get(
            f"{compose.url}/v1/jobs", headers={"Authorization": f"Bearer {attacker.token}"}
        )
        assert attackers_jobs.json()["items"] == [], "no job from a partial body"
    finally:
        slow_clients.release(held)


def test_a_small_job_checkpoints_to_s3_succeeds_and_survives_down_and_up(stack: Stack) -> None:
    cli, compose = stack.cli, stack.compose
    job_id = cli.submit(spec("compose-small", 60))

    shown = stack.finished(job_id)

    assert shown["job"]["status"] == "SUCCEEDED", stack.diagnostics(job_id)
    stack.measure_speed(job_id)
    keys = compose.s3_objects("checkpoints/")
    mine = [key for key in keys if f"/{job_id}/" in f"/{key}"]
    assert any(key.endswith("manifest.json") for key in mine), keys[:50]
    steps = {part for key in mine for part in key.split("/") if part.startswith("step-")}
    assert "step-000000000060" in steps, sorted(steps)

    # down (volumes kept) and up: the job, its attempts and its checkpoints are still there.
    compose.run("down", "-t", "60")
    compose.up()
    again = cli.show(job_id)
    assert again["job"]["status"] == "SUCCEEDED"
    assert [a["id"] for a in again["attempts"]] == [a["id"] for a in shown["attempts"]]
    assert sorted(compose.s3_objects("checkpoints/")) == sorted(keys)


def test_stopping_the_worker_drains_the_trainer_and_the_job_resumes(stack: Stack) -> None:
    cli, compose = stack.cli, stack.compose
    steps = stack.sized_steps(90, at_least=400)
    job_id = cli.submit(spec("compose-drain", steps))
    # Running, with a checkpoint behind it and well short of the end.
    stack.wait(
        job_id,
        lambda job: (
            job["status"] == "RUNNING"
            and ((job.get("progress") or {}).get("checkpoint_step") or 0) >= 10
        ),
        timeout=600,
    )

    # The trainer's S3 keys are its attempt's own: its job's prefix, nothing of another job's.
    (keys,) = compose.trainer_s3_keys()
    assert keys[0] != compose.env.get("S3_ACCESS_KEY", "gpujobs"), "never the server's own keys"
    others = [key for key in compose.s3_objects("checkpoints/") if f"/{job_id}/" not in f"/{key}"]
    own = f"checkpoints/{job_id}/"
    calls = {
        "list own": f"s3.list_objects_v2(Bucket={BUCKET!r}, Prefix={own!r})",
        "write own": f"s3.put_object(Bucket={BUCKET!r}, Key={own + 'probe'!r}, Body=b'x')",
        "list bucket": f"s3.list_objects_v2(Bucket={BUCKET!r})",
        "list all checkpoints": f"s3.list_objects_v2(Bucket={BUCKET!r}, Prefix='checkpoints/')",
        "write another job's": f"s3.put_object(Bucket={BUCKET!r}, Key='checkpoints/x/m', Body=b'')",
    }
    if others:  # scenario 1's checkpoints, when it ran first
        calls["read another job's"] = f"s3.get_object(Bucket={BUCKET!r}, Key={others[0]!r})"
    outcomes = compose.s3_outcomes(keys, calls)
    assert (outcomes["list own"], outcomes["write own"]) == ("ok", "ok"), outcomes
    assert {o for name, o in outcomes.items() if "own" not in name} == {"AccessDenied"}, outcomes

    compose.run("stop", "worker", timeout=300)  # the worker's stop_grace_period bounds it

    stopped = cli.show(job_id)
    assert stopped["job"]["status"] == "RUNNING", "nobody has observed the attempt's end yet"
    (attempt,) = stopped["attempts"]
    drained = compose.exec("api", "ls", f"/var/lib/gpujobs/attempts/{attempt['id']}").split()
    assert "drained" in drained and "exit_code" in drained, drained
    compose.run("start", "worker")
    shown = stack.finished(job_id)

    assert shown["job"]["status"] == "SUCCEEDED", stack.diagnostics(job_id)
    attempts = shown["attempts"]
    assert len(attempts) >= 2, stack.diagnostics(job_id)
    first = attempts[0]
    assert first["end_reason"] == "preempted", stack.diagnostics(job_id)
    assert attempts[1]["resume_from_step"] and attempts[1]["resume_from_step"] > 0
    assert first["steps_lost"] == 0, "the trainer checkpointed on the notice"
    assert shown["job"]["restarts"] == 0, "a stopped worker is not the job's failure"
    # The first attempt has ended: its keys were revoked.
    gone = compose.s3_outcomes(keys, {"list own": calls["list own"]})
    assert gone == {"list own": "InvalidAccessKeyId"}, gone


def test_with_the_spot_market_on_a_job_is_preempted_and_resumes(stack: Stack) -> None:
    cli, compose = stack.cli, stack.compose
    # Replays the trace: spot for 4 ticks of TRACE_TICK_S, then gone for one tick, repeatedly.
    compose.write_env(
        GPUJOBS_SPOT_MARKET="trace",
        GPUJOBS_SPOT_TRACE="/etc/gpujobs/spot-trace.json",
        GPUJOBS_SPOT_TRACE_TIME_SCALE="60",
    )
    compose.up()  # recreates the services whose environment changed
    window = TRACE_TICK_S * TRACE_PATTERN.count(1)
    # More training than one spot window holds at this machine's speed: preempted at least once.
    # Three windows' worth: the speed is measured once, and a machine that was loaded then (make
    # test runs the real cluster's tests beside this) trained 2x faster later, finishing 1.5
    # windows' worth inside one window.
    steps = stack.sized_steps(3 * window, at_least=200)
    job_id = cli.submit(spec("compose-spot", steps, capacity=["spot"]))

    shown = stack.finished(job_id, timeout=1200)

    assert shown["job"]["status"] == "SUCCEEDED", stack.diagnostics(job_id)
    attempts = shown["attempts"]
    assert len(attempts) > 1, stack.diagnostics(job_id)
    assert all(a["capacity_type"] == "spot" for a in attempts)
    assert {a["end_reason"] for a in attempts[:-1]} <= {"preempted", "no_capacity"}
    assert "preempted" in {a["end_reason"] for a in attempts[:-1]}
    assert attempts[-1]["end_reason"] == "succeeded"
    assert shown["job"]["preemptions"] >= 1
    assert shown["job"]["restarts"] == 0
    assert any((a.get("resume_from_step") or 0) > 0 for a in attempts[1:])
