"""The local launcher runs every rank of a job on one machine: submit and estimate refuse a shape
that machine cannot run, naming the field (issue 22, row 10). `nodes: 256, gpus_per_node: 8`
was estimated and placed as 2,048 processes on one machine; 2 x 4 GPUs with 2 loader workers
each started 26."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.database import make_engine, make_session_factory
from api.migrate import upgrade_to_head
from api.settings import Settings
from tests.conftest import job_body, make_team

T4 = {"gpu_models": ["T4"]}  # sold with 1, 2 and 4 GPUs per node
ENDPOINTS = ("/v1/estimate", "/v1/jobs")


def _client(tmp_path: Path, **settings: object) -> Iterator[tuple[TestClient, dict[str, str]]]:
    config = Settings(
        home=tmp_path / "home", credentials_file=tmp_path / "credentials.json", **settings
    )
    engine = make_engine(config)
    upgrade_to_head(engine)
    factory = make_session_factory(engine)
    auth = {"Authorization": f"Bearer {make_team(factory, 'team-a')}"}
    app = create_app(config, session_factory=factory, nudge=lambda task, job_id: None)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, auth
    engine.dispose()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The local launcher on a machine the operator says runs 4 ranks."""
    yield from _client(tmp_path, launcher="local", local_max_ranks=4)


@pytest.fixture
def kubernetes(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    yield from _client(tmp_path, launcher="kubernetes", local_max_ranks=4)


def spec(name: str, resources: dict[str, object], workers: int = 2) -> dict[str, object]:
    trainer = {"steps": 100, "dataloader": {"num_workers": workers}}
    return job_body(name, trainer=trainer, resources=resources, estimated_hours=1)


def refused_fields(client: TestClient, auth: dict[str, str], body: dict[str, object]) -> list[str]:
    fields = []
    for url in ENDPOINTS:
        response = client.post(url, json=body, headers=auth)
        assert response.status_code == 422, (url, response.text)
        fields.append(sorted(f["field"] for f in response.json()["error"]["fields"]))
    assert fields[0] == fields[1]  # estimate refuses what submit refuses, and says the same
    return fields[0]


def test_shapes_the_machine_cannot_run_are_refused_naming_the_field(
    local: tuple[TestClient, dict[str, str]],
) -> None:
    client, auth = local
    huge = {"gpu_models": ["H100"], "nodes": 256, "gpus_per_node": 8}
    assert refused_fields(client, auth, spec("huge", huge)) == [
        "resources.gpus_per_node",
        "resources.nodes",
    ]
    # Two nodes of what one machine could hold: still two machines' worth, run on one.
    assert refused_fields(client, auth, spec("two", {**T4, "nodes": 2, "gpus_per_node": 2})) == [
        "resources.nodes"
    ]
    eight = {"gpu_models": ["H100"], "gpus_per_node": 8}
    assert refused_fields(client, auth, spec("eight", eight)) == ["resources.gpus_per_node"]
    # 4 ranks with 3 workers each are 16 processes; 4 ranks with the default 2 would be 12.
    four = {**T4, "gpus_per_node": 4}
    assert refused_fields(client, auth, spec("workers", four, workers=3)) == [
        "trainer.dataloader.num_workers"
    ]
    response = client.post("/v1/jobs", json=spec("workers", four, workers=3), headers=auth)
    assert "at most 2 workers per rank" in response.json()["error"]["message"]
    assert client.get("/v1/jobs", headers=auth).json()["items"] == []

    # What the machine holds is accepted.
    fits = spec("fits", four)
    assert client.post("/v1/estimate", json=fits, headers=auth).status_code == 200
    assert client.post("/v1/jobs", json=fits, headers=auth).status_code == 201
    lean = spec("lean", {**T4, "gpus_per_node": 2}, workers=5)  # 2 x (1 + 5) = 12 processes
    assert client.post("/v1/jobs", json=lean, headers=auth).status_code == 201


def test_the_limit_is_an_operator_setting_of_the_local_launcher_only(
    kubernetes: tuple[TestClient, dict[str, str]],
) -> None:
    assert Settings().local_max_ranks == os.cpu_count()
    assert Settings(local_max_ranks=64).local_max_ranks == 64
    # Kubernetes gives each node a machine of its own.
    client, auth = kubernetes
    huge = spec("huge", {"gpu_models": ["H100"], "nodes": 256, "gpus_per_node": 8})
    response = client.post("/v1/estimate", json=huge, headers=auth)
    assert response.status_code == 200, response.text
    assert response.json()["plans"][0]["nodes"] == 256
