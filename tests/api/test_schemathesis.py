"""Property-based API fuzzing from our own OpenAPI document: no input may cause a 500.

Runs every operation with generated (valid and invalid) inputs, authenticated as a real team,
on SQLite and PostgreSQL, and checks responses against the documented schemas.
"""

from __future__ import annotations

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.conftest import job_body


@pytest.fixture
def api_schema(app: FastAPI):  # type: ignore[no-untyped-def]
    loaded = schemathesis.openapi.from_asgi("/openapi.json", app)
    # Each test sends a real token itself; generating the declared bearer header would only
    # produce "missing credentials" cases that the explicit token then overrides.
    loaded.config.generation.update(with_security_parameters=False)
    return loaded


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_input_causes_a_server_error(case, auth: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    # Every default check (no 5xx, documented status codes, content types, response schemas)
    # except "schema-valid data is accepted": cross-field rules such as "exactly one of steps and
    # epochs" or "deadline in the future" cannot be written in JSON Schema.
    _no_following(case)
    case.call_and_validate(headers=auth, excluded_checks=[positive_data_acceptance])


def _no_following(case) -> None:  # type: ignore[no-untyped-def]
    # The fuzzer can create a job, name it "503" and follow GET /v1/jobs/503/logs: nothing runs
    # jobs here, so that stream rightly never ends, and the in-process transport waits for the
    # whole body (a 10 s read timeout). Following is tested over real HTTP (tests/api/test_load.py,
    # tests/api/test_admin_and_standalone.py).
    follow = (case.query or {}).get("follow") if case.path.endswith("/logs") else None
    if str(follow).lower() in TRUE:  # as FastAPI reads a bool; other values still get their 422
        case.query.pop("follow")


TRUE = {"1", "true", "t", "yes", "y", "on"}


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_input_causes_a_server_error_for_the_admin(case, token: str) -> None:  # type: ignore[no-untyped-def]
    """The admin token reaches what team tokens cannot (reservations, budgets, every team)."""
    del token  # a team exists, so budget endpoints can find one
    admin = {"Authorization": "Bearer admin-secret-for-tests"}
    _no_following(case)
    case.call_and_validate(headers=admin, excluded_checks=[positive_data_acceptance])


def test_fuzzing_reaches_real_jobs(app: FastAPI, auth: dict[str, str]) -> None:
    """The fuzzer mostly sees 404s for made-up ids; make sure real ids answer per the schema too."""
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        job = client.post("/v1/jobs", json=job_body(), headers=auth).json()
        for path in ("", "/events", "/attempts"):
            assert client.get(f"/v1/jobs/{job['id']}{path}", headers=auth).status_code == 200
