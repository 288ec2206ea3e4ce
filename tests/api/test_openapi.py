"""The OpenAPI document and /docs as a newcomer without internet access meets them."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from openapi_spec_validator import validate


def test_the_document_is_valid_and_declares_the_bearer_scheme(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    validate(document)
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    operations = {
        op["operationId"]: op for path in document["paths"].values() for op in path.values()
    }
    assert operations["list_jobs"]["security"] == [{"bearerAuth": []}]
    assert operations["submit_job"]["security"] == [{"bearerAuth": []}]
    assert "security" not in operations["healthz"]


def test_operation_ids_are_the_handler_names(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    ids = [op["operationId"] for path in document["paths"].values() for op in path.values()]
    assert len(ids) == len(set(ids))
    assert {"submit_job", "list_jobs", "get_job", "cancel_job", "job_logs"} <= set(ids)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", op_id) for op_id in ids), ids


def test_every_operation_declares_overload_and_the_replay(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    for path in document["paths"].values():
        for operation in path.values():
            assert "Retry-After" in operation["responses"]["503"]["headers"]
    submit = document["paths"]["/v1/jobs"]["post"]["responses"]
    assert set(submit["200"]["headers"]) == {"Location", "Idempotent-Replayed"}
    assert "Location" in submit["201"]["headers"]
    logs = document["paths"]["/v1/jobs/{job_id}/logs"]["get"]["responses"]["200"]
    assert logs["content"]["text/plain"]["schema"] == {"type": "string"}


def test_docs_are_served_from_the_package(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    external = re.findall(r"""(?:src|href)=["'](https?://[^"']+)""", page.text)
    assert external == [], external
    for asset in re.findall(r"""(?:src|href)=["'](/docs/assets/[^"']+)""", page.text):
        assert client.get(asset).status_code == 200, asset
