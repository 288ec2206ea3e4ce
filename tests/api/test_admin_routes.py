"""The caller is checked before the body (issue 36, attack 4): a team token posting a malformed
body to an admin route was told what was wrong with the body (422), which answers questions
about the admin API to whoever asks. Every admin route in the app's route table is tried, so a
new one is covered without a line here."""

from __future__ import annotations

import re
import uuid

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

ID = str(uuid.uuid4())
BODIES: dict[str, dict[str, object]] = {
    "malformed JSON": {"content": b'{"name": ', "headers": {"Content-Type": "application/json"}},
    "wrong shape": {"json": ["not", "an", "object"]},
    "unknown fields": {"json": {"monthly_usd": "lots", "name": "", "zone": 7}},
    "wrong content type": {"content": b"name=x", "headers": {"Content-Type": "text/plain"}},
}


def admin_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path with its parameters filled in) for every admin operation."""
    found = []
    for route in iter_route_contexts(app.routes):  # as the OpenAPI document reads them
        if not route.path or not route.methods:
            continue
        if not (route.path.startswith("/v1/admin") or "admin" in getattr(route, "tags", [])):
            continue
        path = re.sub(r"\{team\}", "team-a", route.path)
        path = re.sub(r"\{[a-z_]+\}", ID, path)
        found += [(method, path) for method in sorted(route.methods)]
    return found


def test_the_route_table_has_the_admin_routes(app: FastAPI) -> None:
    routes = admin_routes(app)
    assert ("POST", "/v1/admin/teams") in routes
    assert ("PUT", "/v1/admin/teams/team-a/budget") in routes
    assert ("POST", "/v1/admin/reservations") in routes
    assert ("POST", "/v1/admin/teams/team-a/tokens") in routes


@pytest.mark.parametrize("body", sorted(BODIES))
def test_a_team_token_is_refused_before_its_body_is_read(
    app: FastAPI, client: TestClient, auth: dict[str, str], body: str
) -> None:
    answers = {}
    for method, path in admin_routes(app):
        request = BODIES[body] | {"headers": auth | dict(BODIES[body].get("headers", {}))}  # type: ignore[arg-type]
        answers[method, path] = client.request(method, path, **request).status_code  # type: ignore[arg-type]
    assert set(answers.values()) == {403}, answers


def test_no_token_is_401_whatever_the_body(app: FastAPI, client: TestClient) -> None:
    answers = {
        (method, path): client.request(method, path, **BODIES["malformed JSON"]).status_code  # type: ignore[arg-type]
        for method, path in admin_routes(app)
    }
    assert set(answers.values()) == {401}, answers
