"""With the local launcher a job runs as a process on the worker's machine, yet is placed on a
cloud offer at a price: the CLI says so wherever it shows a placement or a cost (issue 23, 2),
and says nothing of the kind for a deployment that launches on Kubernetes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.database import transaction
from api.jobs import lifecycle
from api.models import Job as JobRow
from gpujobs.resources import SIMULATED_NOTICE, JobStatus
from tests.sdk.server import LiveApi, live_api
from tests.sdk.test_cli import EXAMPLES, gpujobs

FIRST_RUN = str(EXAMPLES / "first-run.yaml")
SPOT = {"cloud": "aws", "region": "ap-east-1", "zone": "ape1-az3", "capacity_type": "spot"}


@pytest.fixture(params=["local", "kubernetes"])
def api(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LiveApi]:
    for name in ("GPUJOBS_URL", "GPUJOBS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUJOBS_CREDENTIALS_FILE", str(tmp_path / "no-credentials.json"))
    with live_api(tmp_path / "home", launcher=request.param) as running:
        yield running


def _place_and_finish(api: LiveApi, stop: threading.Event) -> None:
    """What the scheduler and the trainer do to the first job submitted: place it on spot in
    ap-east-1, run it, succeed."""
    while not stop.is_set():
        with transaction(api.session_factory) as session:
            row = session.query(JobRow).first()
            job_id = None if row is None else row.id
        if job_id is not None:
            break
        time.sleep(0.02)
    else:
        return
    api.add_attempt(job_id, 1, price_per_hour=0.09, **SPOT)
    placed = {"attempt": 1, "offer": "aws:ape1-az3:g4dn.xlarge:T4x1", "capacity_type": "spot",
              "price_per_hour": 0.09}  # fmt: skip
    steps = ((JobStatus.SCHEDULED, "spot", placed), (JobStatus.RUNNING, "running", {}),
             (JobStatus.SUCCEEDED, "done", {}))  # fmt: skip
    for status, reason, data in steps:
        time.sleep(0.2)  # a poll or two sees each
        with transaction(api.session_factory) as session:
            job = session.get(JobRow, job_id)
            assert job is not None
            lifecycle.switch_status(session, job, status, reason=reason, data=data)


def test_submit_wait_and_show_say_whether_the_placement_is_simulated(
    api: LiveApi,
    env: dict[str, str],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    local = request.node.callspec.params["api"] == "local"
    monkeypatch.setenv("COLUMNS", "80")
    stop = threading.Event()
    scheduler = threading.Thread(target=_place_and_finish, args=(api, stop), daemon=True)
    scheduler.start()
    try:
        code, out = gpujobs(
            "submit", FIRST_RUN, "-y", "--wait", "--poll", "0.05", "--timeout", "60"
        )
    finally:
        stop.set()
        scheduler.join()
    waited = capsys.readouterr().err
    assert code == 0, waited + out
    placed = "placed (simulated) on spot" if local else "placed on spot"
    assert f"attempt 1 {placed} aws:ape1-az3" in " ".join(waited.split()), waited
    assert (SIMULATED_NOTICE in " ".join(waited.split())) is local, waited
    assert ("simulated" in waited) is local

    job_id = out.split()[0]
    code, shown = gpujobs("show", job_id)
    assert code == 0
    placement = " ".join(shown.split("placement:")[1].split("cost:")[0].split())
    assert placement.startswith("attempt 1 (running): aws ap-east-1/ape1-az3")
    assert placement.endswith("spot at $0.09/h (simulated)" if local else "spot at $0.09/h")
    assert (SIMULATED_NOTICE in " ".join(shown.split())) is local
    assert ("simulated" in shown) is local
    assert max(len(line) for line in shown.splitlines()) <= 80, shown

    for command in (("ls",), ("events", job_id), ("usage",), ("budget",)):
        code, listed = gpujobs(*command)
        assert code == 0 and (SIMULATED_NOTICE in " ".join(listed.split())) is local, command
        code, listed = gpujobs(*command, "--json")
        assert code == 0 and "simulated" not in listed, command  # JSON stays the contract's


def test_the_deployment_is_in_the_openapi_document_and_needs_a_token(
    api: LiveApi, team_token: str, request: pytest.FixtureRequest
) -> None:
    local = request.node.callspec.params["api"] == "local"
    document = httpx.get(f"{api.url}/openapi.json").json()
    answer = document["paths"]["/v1/deployment"]["get"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Deployment"
    }
    fields = document["components"]["schemas"]["Deployment"]["properties"]
    assert {"launcher", "simulated", "notice"} <= fields.keys()
    assert "simulated" in fields["simulated"]["description"]

    assert httpx.get(f"{api.url}/v1/deployment").status_code == 401
    body = httpx.get(
        f"{api.url}/v1/deployment", headers={"Authorization": f"Bearer {team_token}"}
    ).json()
    launcher = "local" if local else "kubernetes"
    notice = SIMULATED_NOTICE if local else None
    assert body == {"launcher": launcher, "simulated": local, "notice": notice}
