"""The SDK against a real running API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from api.auth import issue_token
from api.database import transaction
from api.models import Job as Job_
from gpujobs import errors
from gpujobs.client import AsyncClient, Client, load_spec
from gpujobs.operations import Operation
from gpujobs.resources import Job, JobStatus
from gpujobs.spec import JobSpec
from gpujobs.usage import Budget
from tests.conftest import job_body, make_team
from tests.sdk.server import LiveApi


def test_submit_get_and_cancel_with_each_kind_of_spec(gj: Client, tmp_path: Path) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text("name: from-yaml\ntrainer: {steps: 50}\n")
    from_yaml = gj.submit(spec_file)
    gj.cancel("from-yaml")  # a name is unique among the team's unfinished jobs
    from_str_path = gj.submit(str(spec_file))
    from_dict = gj.submit(job_body("from-dict"))
    from_model = gj.submit(JobSpec.model_validate(job_body("from-model")))
    assert [j.name for j in (from_yaml, from_str_path, from_dict, from_model)] == [
        "from-yaml",
        "from-yaml",
        "from-dict",
        "from-model",
    ]
    assert from_yaml.id != from_str_path.id  # a fresh idempotency key per call
    assert isinstance(from_yaml, Job) and from_yaml.status == JobStatus.PENDING
    fetched = gj.get(from_dict.id)
    assert fetched == from_dict
    cancelled = gj.cancel(from_dict.id)
    assert cancelled.status == JobStatus.CANCELLED
    assert gj.get(from_dict.id).status == JobStatus.CANCELLED
    assert [e.to_status for e in gj.events(from_dict.id)] == [
        JobStatus.PENDING,
        JobStatus.CANCELLED,
    ]
    assert gj.attempts(from_dict.id) == []


def test_the_same_idempotency_key_makes_one_job(gj: Client) -> None:
    first = gj.submit(job_body("once"), idempotency_key="retry-me")
    again = gj.submit(job_body("once"), idempotency_key="retry-me")
    assert again.id == first.id
    assert [j.id for j in gj.list()] == [first.id]
    with pytest.raises(errors.Conflict) as caught:
        gj.submit(job_body("different"), idempotency_key="retry-me")
    assert caught.value.status == 409
    assert caught.value.fields[0].field == "Idempotency-Key"


def test_list_walks_every_page_and_filters_by_status(gj: Client) -> None:
    ids = [gj.submit(job_body(f"job-{i}")).id for i in range(7)]
    gj.cancel(ids[1])
    gj.cancel(ids[4])
    listed = [j.id for j in gj.list(page_size=2)]
    assert listed == list(reversed(ids))
    cancelled = [j.id for j in gj.list(status="cancelled", page_size=1)]
    assert cancelled == [ids[4], ids[1]]
    both = {j.id for j in gj.list(status=[JobStatus.CANCELLED, "PENDING"], page_size=3)}
    assert both == set(ids)


def test_wait_returns_the_terminal_job_and_reports_progress(gj: Client) -> None:
    job = gj.submit(job_body("waited"))
    seen: list[JobStatus] = []

    def on_progress(current: Job) -> None:
        seen.append(current.status)
        if current.status == JobStatus.PENDING:
            gj.cancel(current.id)  # what another user or process would do

    done = gj.wait(job.id, poll=0.01, on_progress=on_progress)
    assert done.status == JobStatus.CANCELLED
    assert seen == [JobStatus.PENDING, JobStatus.CANCELLED]


def test_on_progress_fires_on_a_change_only_and_on_poll_on_every_poll(gj: Client) -> None:
    """A job that waits (no scheduler here) does not change: one call, not one per poll."""
    job = gj.submit(job_body("unchanged"))
    changes: list[Job] = []
    polls: list[Job] = []
    with pytest.raises(errors.WaitTimeout):
        gj.wait(job.id, timeout=0.5, poll=0.01, on_progress=changes.append, on_poll=polls.append)
    assert [j.status for j in changes] == [JobStatus.PENDING]
    assert len(polls) > 3


def test_wait_gives_up_after_its_timeout(gj: Client) -> None:
    job = gj.submit(job_body("slow"))
    with pytest.raises(errors.WaitTimeout) as caught:
        gj.wait(job.id, timeout=0.05, poll=0.01)
    assert isinstance(caught.value, TimeoutError)
    assert "PENDING" in str(caught.value)


def test_api_errors_become_typed_exceptions(api: LiveApi, gj: Client) -> None:
    with pytest.raises(errors.NotFound) as missing:
        gj.get("00000000-0000-7000-8000-000000000000")
    assert missing.value.status == 404 and missing.value.code == "not_found"

    with Client(api.url, "gpj_not-a-real-token") as stranger, pytest.raises(errors.Unauthorized):
        stranger.get("anything")
    with Client(api.url, token=None) as anonymous, pytest.raises(errors.Unauthorized):
        list(anonymous.list())

    # A trainer's job-scoped token may only report progress: listing jobs is refused (403).
    job = gj.submit(job_body("trained"))
    with transaction(api.session_factory) as session:
        team_id = session.scalars(select(Job_.team_id).where(Job_.id == job.id)).one()
        job_token = issue_token(session, team_id=team_id, job_id=job.id)
    with Client(api.url, job_token) as trainer, pytest.raises(errors.Forbidden) as refused:
        list(trainer.list())
    assert refused.value.status == 403 and refused.value.code == "forbidden"


def test_another_teams_job_is_not_found(api: LiveApi, gj: Client) -> None:
    theirs = make_team(api.session_factory, "team-b")
    with Client(api.url, theirs) as other:
        job = other.submit(job_body("private"))
    with pytest.raises(errors.NotFound):
        gj.get(job.id)
    with pytest.raises(errors.NotFound):
        gj.cancel(job.id)


def test_an_invalid_spec_names_each_field_before_and_after_sending(gj: Client) -> None:
    bad = {"name": "Bad Name", "trainer": {"steps": 10, "batch_size": 0}}
    with pytest.raises(errors.InvalidSpec) as local:
        gj.submit(bad)
    assert {f.field for f in local.value.fields} == {"name", "trainer.batch_size"}

    # The server checks too: a raw request the SDK did not validate is refused the same way.
    with pytest.raises(errors.InvalidSpec) as remote:
        gj._send(Operation("POST", "/v1/jobs", read=lambda response: response, json=bad))
    assert remote.value.status == 422
    assert {f.field for f in remote.value.fields} == {"name", "trainer.batch_size"}


def test_unreadable_and_malformed_spec_files_are_invalid_specs(gj: Client, tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidSpec, match="cannot read"):
        gj.submit(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    with pytest.raises(errors.InvalidSpec, match="not valid YAML"):
        gj.submit(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string\n")
    with pytest.raises(errors.InvalidSpec, match="mapping"):
        load_spec(scalar)


def test_budget_reads_the_teams_budget_and_what_its_jobs_hold(api: LiveApi, gj: Client) -> None:
    unset = gj.budget()
    assert (unset.team, unset.monthly_microusd, unset.remaining_usd) == ("team-a", None, None)
    admin = {"Authorization": f"Bearer {api.admin_token}"}
    put = httpx.put(
        f"{api.url}/v1/admin/teams/team-a/budget", json={"monthly_usd": 1000}, headers=admin
    )
    assert put.status_code == 200, put.text
    resources = {"gpu_models": ["T4"], "regions": ["us-east-1"]}
    gj.submit(job_body("held", resources=resources, estimated_hours=4))
    with api.session_factory() as session:
        held = sum(session.scalars(select(Job_.quote_hold_microusd).where(Job_.holds_budget)))
    budget = gj.budget()
    assert held > 0 and (budget.held_microusd, budget.spent_microusd) == (held, 0)
    assert budget.remaining_microusd == 1_000_000_000 - held
    assert budget.remaining_usd == (1_000_000_000 - held) / 1_000_000
    assert Budget.model_validate(put.json()).monthly_microusd == 1_000_000_000

    async def read() -> Budget:
        async with AsyncClient(api.url, gj.token) as client:
            return await client.budget()

    assert asyncio.run(read()) == budget


def test_async_client_does_the_same(api: LiveApi, team_token: str) -> None:
    async def scenario() -> tuple[list[str], list[str], JobStatus, list[str]]:
        async with AsyncClient(api.url, team_token) as gj:
            ids = [(await gj.submit(job_body(f"a-{i}"))).id for i in range(3)]
            listed = [j.id async for j in gj.list(page_size=2)]
            statuses: list[str] = []

            async def on_progress(job: Job) -> None:
                statuses.append(job.status.value)
                if not job.status.terminal:
                    await gj.cancel(job.id)

            done = await gj.wait(ids[0], poll=0.01, on_progress=on_progress)
            with pytest.raises(errors.NotFound):
                await gj.get("00000000-0000-7000-8000-000000000000")
            return ids, listed, done.status, statuses

    ids, listed, status, statuses = asyncio.run(scenario())
    assert listed == list(reversed(ids))
    assert status == JobStatus.CANCELLED
    assert statuses == ["PENDING", "CANCELLED"]
