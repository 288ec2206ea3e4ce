"""Retries, failures and the endpoints other teams are building, through a real HTTP server."""

from __future__ import annotations

import asyncio

import pytest

from gpujobs import errors
from gpujobs.client import AsyncClient, Client, RetryPolicy
from tests.conftest import job_body
from tests.sdk.flaky import Answer, flaky_server
from tests.sdk.server import LiveApi, free_port

FAST = RetryPolicy(max_attempts=3, backoff=0.001, max_backoff=0.01)
UNAVAILABLE = Answer(503, {"error": {"code": "unavailable", "message": "try again"}})


def test_5xx_is_retried_with_the_same_idempotency_key(api: LiveApi, team_token: str) -> None:
    with flaky_server(api.url) as (url, server):
        server.on("POST", "/v1/jobs", UNAVAILABLE, Answer(502, "bad gateway"))
        with Client(url, team_token, retry=FAST) as gj:
            job = gj.submit(job_body("flaky"))
            assert [j.id for j in gj.list()] == [job.id]
    posts = server.requests("POST", "/v1/jobs")
    assert len(posts) == 3
    assert len({p.headers["Idempotency-Key"] for p in posts}) == 1


def test_a_lost_answer_and_a_retry_still_make_one_job(api: LiveApi, team_token: str) -> None:
    with flaky_server(api.url) as (url, server):
        # The API creates the job, but its answer never reaches the client.
        server.on("POST", "/v1/jobs", Answer(504, "gateway timeout", forward_first=True))
        with Client(url, team_token, retry=FAST) as gj:
            job = gj.submit(job_body("once-only"))
    with Client(api.url, team_token) as direct:
        assert [j.id for j in direct.list()] == [job.id]


def test_gives_up_after_max_attempts_with_a_server_error(api: LiveApi, team_token: str) -> None:
    with flaky_server(api.url) as (url, server):
        server.on("GET", "/v1/jobs", *[UNAVAILABLE] * 5)
        with Client(url, team_token, retry=FAST) as gj, pytest.raises(errors.ServerError) as caught:
            list(gj.list())
    assert caught.value.status == 503 and caught.value.message == "try again"
    assert len(server.requests("GET", "/v1/jobs")) == 3


def test_max_attempts_argument_limits_tries(api: LiveApi, team_token: str) -> None:
    with flaky_server(api.url) as (url, server):
        server.on("GET", "/v1/jobs", *[UNAVAILABLE] * 5)
        with Client(url, team_token, max_attempts=1) as gj, pytest.raises(errors.ServerError):
            list(gj.list())
    assert len(server.requests("GET", "/v1/jobs")) == 1


def test_429_is_retried_honouring_retry_after(api: LiveApi, team_token: str) -> None:
    slow_down = Answer(429, {"error": {"code": "rate_limited", "message": "slow down"}})
    slow_down.headers["Retry-After"] = "0"
    with flaky_server(api.url) as (url, server):
        server.on("GET", "/v1/jobs", slow_down)
        with Client(url, team_token, retry=FAST) as gj:
            assert list(gj.list()) == []
    assert len(server.requests("GET", "/v1/jobs")) == 2


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, errors.BadRequest),
        (401, errors.Unauthorized),
        (403, errors.Forbidden),
        (404, errors.NotFound),
        (409, errors.Conflict),
        (422, errors.InvalidSpec),
    ],
)
def test_4xx_is_never_retried(status: int, kind: type[errors.GpuJobsError]) -> None:
    body = {
        "error": {
            "code": "refused",
            "message": "no",
            "fields": [{"field": "trainer.steps", "reason": "too many"}],
        }
    }
    with flaky_server() as (url, server):
        server.on("GET", "/v1/jobs/x", Answer(status, body))
        with Client(url, "t", retry=FAST) as gj, pytest.raises(kind) as caught:
            gj.get("x")
    assert type(caught.value) is kind
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        status,
        "refused",
        "no",
    )
    assert [(f.field, f.reason) for f in caught.value.fields] == [("trainer.steps", "too many")]
    assert len(server.requests("GET", "/v1/jobs/x")) == 1


def test_an_error_that_is_not_json_still_has_a_message() -> None:
    with flaky_server() as (url, server):
        server.on("GET", "/v1/jobs/x", Answer(404, "<html>nope</html>"))
        with Client(url, "t", retry=FAST) as gj, pytest.raises(errors.NotFound) as caught:
            gj.get("x")
    assert caught.value.message == "<html>nope</html>"


def test_an_unreachable_api_is_a_connection_failure() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url, "t", retry=FAST) as gj, pytest.raises(errors.ConnectionFailed) as caught:
        gj.get("x")
    assert caught.value.status is None
    assert url in caught.value.message


def test_logs_are_text_and_follow_streams_chunks(gj: Client, api: LiveApi) -> None:
    job = gj.submit(job_body("logged"))
    api.finish_with_log(job.id, "step 1\nstep 2\n")
    text = gj.logs(job.id)
    assert text.startswith("=== attempt 1: on-demand g4dn.xlarge")
    assert text.endswith("step 1\nstep 2\n")
    assert "".join(gj.logs(job.id, follow=True)) == text  # the job has ended: the stream ends


def test_estimate_returns_the_contracts_model(gj: Client) -> None:
    estimate = gj.estimate(job_body("priced", estimated_hours=2, deadline_hours=12))
    assert estimate.decision == "place" and estimate.plans
    assert estimate.plans[0].chosen and estimate.plans[0].why == estimate.reason
    assert not any(p.chosen for p in estimate.plans[1:])
    costs = [p.expected_cost for p in estimate.plans[3:]]
    assert costs == sorted(costs)  # after the best of each other capacity type, cheapest first
    with pytest.raises(errors.InvalidSpec) as caught:
        gj.estimate(job_body("unpriced"))  # no estimated_hours: nothing to price
    assert [f.field for f in caught.value.fields] == ["estimated_hours"]


def test_the_async_client_retries_and_streams_too(api: LiveApi, team_token: str) -> None:
    async def scenario(url: str) -> tuple[str, list[str], str]:
        async with AsyncClient(url, team_token, retry=FAST) as gj:
            job = await gj.submit(job_body("async-flaky"))
            api.finish_with_log(job.id, "a\nb\n")
            chunks = [chunk async for chunk in gj.follow_logs(job.id)]
            return job.id, chunks, await gj.logs(job.id)

    with flaky_server(api.url) as (url, server):
        server.on("POST", "/v1/jobs", UNAVAILABLE)
        job_id, chunks, text = asyncio.run(scenario(url))
    assert len(server.requests("POST", "/v1/jobs")) == 2
    assert "".join(chunks) == text and text.endswith("a\nb\n")
    with Client(api.url, team_token) as direct:
        assert [j.id for j in direct.list()] == [job_id]
