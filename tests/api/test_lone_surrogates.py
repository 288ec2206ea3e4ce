"""A lone surrogate is not text (issue 22, row 11). JSON may write half a UTF-16 pair as an
escape, "\\ud800"; Python decodes it into a string no encoder takes back. In a workload option
or an environment variable (strings without constraints) it passed validation, and the request
then failed with a 500 where the job was written, or the error naming it was encoded. Every
string of a spec, keys included, is now a 422 naming the field."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

SURROGATE = "\\ud800"  # as the JSON body writes it: backslash, u, d800
# The spec with one string made of a surrogate (the `{}`), and the field a 422 must name.
CASES = {
    "trainer.args.\\ud800": '"trainer": {"steps": 10, "args": {"{}": 1}}',
    "trainer.args.corpus": '"trainer": {"steps": 10, "args": {"corpus": "x{}"}}',
    "env.\\ud800": '"trainer": {"steps": 10}, "env": {"{}": "v"}',
    "env.WANDB_MODE": '"trainer": {"steps": 10}, "env": {"WANDB_MODE": "{}"}',
    "resources.regions.1": '"trainer": {"steps": 10}, "resources": {"regions": ["us", "{}"]}',
}


def body(fields: str, name: str = '"surrogate"') -> bytes:
    text = '{"name": ' + name + ', "estimated_hours": 1, ' + fields.replace("{}", SURROGATE) + "}"
    return text.encode("ascii")


@pytest.mark.parametrize("url", ["/v1/estimate", "/v1/jobs"])
def test_a_lone_surrogate_anywhere_in_a_spec_is_a_422_naming_the_field(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    headers = {**auth, "Content-Type": "application/json"}
    bodies = {field: body(fields) for field, fields in CASES.items()}
    bodies["name"] = body('"trainer": {"steps": 10}', name=f'"a{SURROGATE}"')
    for field, raw in bodies.items():
        response = client.post(url, content=raw, headers=headers)
        assert response.status_code == 422, (field, response.text)
        error = response.json()["error"]
        assert [f["field"] for f in error["fields"]] == [field]
        assert "lone surrogate (\\ud800)" in error["fields"][0]["reason"]
    assert client.get("/v1/jobs", headers=auth).json()["items"] == []
