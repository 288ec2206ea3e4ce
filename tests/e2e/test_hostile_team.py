"""A hostile team against the embedded service, run as root the way `make run` runs it (issue 22):
team `evil`, allowed a workload module of its own (tests/worker/hostile_output.py, as an operator
allows), plants links and FIFOs where the server reads a trainer's output, while the default team
trains. Nothing of the server's reaches evil, the server keeps answering, the honest job succeeds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from devstack.confinement import open_directory, trainer_python, trainer_python_path
from devstack.ports import free_port, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

ADMIN = "gpj_admin-never-shown-to-a-team-4b1d"
WORKLOAD = "tests.worker.hostile_output:build"
TINY = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "corpus_bytes": 50_000}
FINISHED = {"SUCCEEDED", "FAILED", "CANCELLED"}


@dataclass
class Service:
    url: str
    default: dict[str, str]
    evil: dict[str, str]

    def submit(self, headers: dict[str, str], spec: dict[str, Any]) -> str:
        response = httpx.post(f"{self.url}/v1/jobs", json=spec, headers=headers, timeout=30)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def finished(self, headers: dict[str, str], job_id: str) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            job = httpx.get(f"{self.url}/v1/jobs/{job_id}", headers=headers, timeout=10).json()
            return job if job["status"] in FINISHED else None

        found: dict[str, Any] = wait_for(done, timeout=300, what=f"job {job_id} to finish")
        return found


@pytest.fixture
def service() -> Iterator[Service]:
    base = open_directory()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env |= {
        "HOME": str(base),
        "GPUJOBS_HOME": str(base / "home"),
        "GPUJOBS_PORT": str(port),
        "GPUJOBS_ADMIN_TOKEN": ADMIN,
        "GPUJOBS_CREDENTIALS_FILE": str(base / "credentials.json"),
        "GPUJOBS_SCHEDULE_INTERVAL_S": "0.5",
        "GPUJOBS_RECONCILE_INTERVAL_S": "0.5",
        "GPUJOBS_TRAINER_PYTHON": trainer_python(),
        "GPUJOBS_TRAINER_PYTHON_PATH": trainer_python_path(),
        "GPUJOBS_TEAM_WORKLOAD_MODULE_PREFIXES": json.dumps({"evil": ["tests.worker"]}),
    }
    log = open(base / "server.log", "wb")  # noqa: SIM115 - the server's, closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "worker.standalone"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url), timeout=90, what="the embedded service")
        token = json.loads((base / "credentials.json").read_text())["token"]
        admin = {"Authorization": f"Bearer {ADMIN}"}
        created = httpx.post(f"{url}/v1/admin/teams", json={"name": "evil"}, headers=admin)
        assert created.status_code == 201, created.text
        yield Service(
            url=url,
            default={"Authorization": f"Bearer {token}"},
            evil={"Authorization": f"Bearer {created.json()['token']}"},
        )
    finally:
        process.terminate()
        process.wait(timeout=60)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def hostile(name: str, attack: str, **env: str) -> dict[str, Any]:
    return {
        "name": name,
        "trainer": {"workload": WORKLOAD, "steps": 1, "dataloader": {"num_workers": 0}},
        "capacity": {"types": ["on_demand"]},
        "env": {"HOSTILE_OUTPUT": attack, **env},
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="trainers run as their own uids only under root")
def test_a_hostile_team_reaches_nothing_of_the_server_and_no_other_team(service: Service) -> None:
    honest = service.submit(
        service.default,
        {
            "name": "honest",
            "trainer": {"steps": 300, "amp": "off", "args": TINY, "dataloader": {"num_workers": 0}},
            "capacity": {"types": ["on_demand"]},
        },
    )
    attacks = {
        "environ-link": hostile("environ-link", "symlink", HOSTILE_TARGET="/proc/self/environ"),
        "fifo": hostile("fifo", "fifo"),
        "large": hostile("large", "large", HOSTILE_BYTES=str(20 * 2**20)),
        "artifacts": hostile("artifacts", "artifacts", HOSTILE_TARGET="/proc/self/environ"),
    }
    evil = {name: service.submit(service.evil, spec) for name, spec in attacks.items()}

    # The server keeps answering every team while the attacks land.
    for name, job_id in evil.items():
        job = service.finished(service.evil, job_id)
        assert job["status"] == "FAILED", (name, job)
        assert ADMIN not in json.dumps(job), name
        events = httpx.get(f"{service.url}/v1/jobs/{job_id}/events", headers=service.evil).text
        assert ADMIN not in events, name
        assert len(job["status_reason"] or "") <= 5120, name
        assert httpx.get(f"{service.url}/healthz", timeout=5).status_code == 200

    # The planted checkpoint: never listed, never served, the FIFO never blocks.
    artifacts = f"{service.url}/v1/jobs/{evil['artifacts']}/artifacts"
    listing = httpx.get(artifacts, headers=service.evil, timeout=10)
    assert listing.status_code == 200 and listing.json()["checkpoints"] == []
    for name in ("secret", "fifo", "zero"):
        # A read that blocks on the FIFO would time out here and fail the test.
        got = httpx.get(f"{artifacts}/7/{name}", headers=service.evil, timeout=20)
        assert 400 <= got.status_code < 500, (name, got.status_code)
        assert ADMIN.encode() not in got.content and len(got.content) < 4096, name
    # No team sees another's jobs; the honest one trained to the end.
    assert httpx.get(f"{service.url}/v1/jobs/{honest}", headers=service.evil).status_code == 404
    assert service.finished(service.default, honest)["status"] == "SUCCEEDED"
