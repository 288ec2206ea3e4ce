"""What a team's spec may ask for, checked through the real HTTP API on SQLite and PostgreSQL:
which workloads and options, which environment variables, which times, which types."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.budgets.support import ADMIN
from tests.conftest import job_body

ENDPOINTS = ("/v1/jobs", "/v1/estimate")


def refused_fields(client: TestClient, url: str, body: Any, auth: dict[str, str]) -> list[str]:
    """POST raw JSON (NaN and Infinity included, as a client may send them); the 422's fields."""
    response = client.post(
        url,
        content=json.dumps(body).encode(),
        headers={**auth, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, (url, response.status_code, response.text)
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    return [f["field"] for f in error["fields"]]


def trainer(**fields: Any) -> dict[str, Any]:
    return {"steps": 10, **fields}


@pytest.mark.parametrize("url", ENDPOINTS)
def test_a_workload_is_a_builtin_or_under_an_allowed_prefix(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    for workload in ("subprocess:getoutput", "os:system", "bert", "trainer.examples.linear:build"):
        body = job_body(trainer=trainer(workload=workload, args={"env | grep ADMIN": True}))
        assert refused_fields(client, url, body, auth) == ["trainer.workload"], workload
    assert client.get("/v1/jobs", headers=auth).json()["items"] == []


def test_operator_prefixes_per_deployment_and_per_team(
    app: FastAPI, client: TestClient, auth: dict[str, str], other_auth: dict[str, str]
) -> None:
    app.state.settings.workload_module_prefixes = ["acme.models"]
    app.state.settings.team_workload_module_prefixes = {"team-a": ["labs"]}

    submitted = iter(range(100))

    def submit(workload: str, who: dict[str, str]) -> int:
        name = f"job-{next(submitted)}"  # a team's unfinished jobs have distinct names
        body = job_body(name, trainer=trainer(workload=workload, args={"anything": 1}))
        status: int = client.post("/v1/jobs", json=body, headers=who).status_code
        return status

    assert submit("acme.models:build", auth) == 201
    assert submit("acme.models.gpt2:build", other_auth) == 201
    # A prefix matches whole dotted components.
    assert submit("acme.modelsevil:build", auth) == 422
    assert submit("acme:build", auth) == 422
    # A team's own prefixes are its own.
    assert submit("labs.x:build", auth) == 201
    assert submit("labs.x:build", other_auth) == 422


@pytest.mark.parametrize("url", ENDPOINTS)
def test_builtin_options_are_checked_at_submit(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    cases: dict[str, dict[str, Any]] = {
        "trainer.args.n_layers": {"n_layers": 3},  # a typo
        "trainer.args.n_layer": {"n_layer": "3"},
        "trainer.args.block_size": {"block_size": 1},
        "trainer.args.dropout": {"dropout": float("nan")},
        "trainer.args.corpus_bytes": {"corpus_bytes": float("inf")},
        "trainer.args.n_head": {"n_head": True},
        "trainer.args.n_embd": {"n_embd": 30, "n_head": 4},
    }
    for field, args in cases.items():
        body = job_body(trainer=trainer(workload="gpt", args=args))
        assert field in refused_fields(client, url, body, auth), (field, args)
    resnet = job_body(trainer=trainer(workload="resnet", args={"n_layer": 2}))
    assert refused_fields(client, url, resnet, auth) == ["trainer.args.n_layer"]
    good = job_body(
        trainer=trainer(workload="gpt", args={"n_layer": 4, "dropout": 0}), estimated_hours=1
    )
    assert client.post(url, json=good, headers=auth).status_code in (200, 201)


@pytest.mark.parametrize(
    "key",
    [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL",
        "GPUJOBS_ADMIN_TOKEN",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_CLIENT_SECRET",
        "KUBERNETES_SERVICE_HOST",
        "PATH",
        "HOME",
        "USER",
        "SHELL",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "TORCHELASTIC_RUN_ID",
        "HTTPS_PROXY",
        "CUDA_VISIBLE_DEVICES",
        "NCCL_DEBUG_FILE",
        "NCCL_NET_PLUGIN",
        "lower_case",
        "_LEADING",
        "1DIGIT",
    ],
)
def test_env_keys_the_platform_interprets_are_refused_by_name(
    client: TestClient, auth: dict[str, str], key: str
) -> None:
    body = job_body(env={"FINE": "1", key: "x"})
    assert refused_fields(client, "/v1/jobs", body, auth) == [f"env.{key}"]


@pytest.mark.parametrize("url", ENDPOINTS)
def test_an_env_value_no_process_environment_can_hold_is_refused_by_name(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    """A NUL ends a C string: no environment holds one. Accepted, every launch failed and the
    job stayed SCHEDULED while each retry minted a new token (issue 36)."""
    body = job_body(env={"FINE": "1", "BAD": "a\u0000b"}, estimated_hours=1)
    assert refused_fields(client, url, body, auth) == ["env.BAD"]
    response = client.post(url, json=body, headers=auth)
    assert "NUL" in response.json()["error"]["fields"][0]["reason"]


def test_ordinary_env_keys_and_nccl_tuning_are_accepted(
    client: TestClient, auth: dict[str, str]
) -> None:
    env = {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1", "HF_HUB_OFFLINE": "1", "MY_FLAG_2": "x"}
    response = client.post("/v1/jobs", json=job_body(env=env), headers=auth)
    assert response.status_code == 201
    assert response.json()["spec"]["env"] == env


@pytest.mark.parametrize("url", ENDPOINTS)
@pytest.mark.parametrize(
    "deadline",
    ["9999-12-31T23:59:59-23:59", "9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+23:59"],
)
def test_deadlines_out_of_range_are_422(
    client: TestClient, auth: dict[str, str], url: str, deadline: str
) -> None:
    assert refused_fields(client, url, job_body(deadline=deadline), auth) == ["deadline"]


@pytest.mark.parametrize("field", ["starts_at", "ends_at"])
@pytest.mark.parametrize(
    "when", ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "9999-12-31T00:00:00Z"]
)
def test_reservation_times_out_of_range_are_422(client: TestClient, field: str, when: str) -> None:
    body = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "use1-az5",
        "instance_type": "g4dn.xlarge",
        "count": 1,
        "price_per_hour": 0.25,
        field: when,
    }
    assert field in refused_fields(client, "/v1/admin/reservations", body, ADMIN)


@pytest.mark.parametrize("url", ENDPOINTS)
def test_non_finite_floats_are_422(client: TestClient, auth: dict[str, str], url: str) -> None:
    cases: dict[str, dict[str, Any]] = {
        "trainer.max_grad_norm": job_body(trainer=trainer(max_grad_norm=float("inf"))),
        "trainer.learning_rate": job_body(trainer=trainer(learning_rate=float("nan"))),
        "estimated_hours": job_body(estimated_hours=float("inf")),
        "capacity.max_price_per_hour": job_body(capacity={"max_price_per_hour": float("nan")}),
    }
    for field, body in cases.items():
        assert field in refused_fields(client, url, body, auth), field


@pytest.mark.parametrize("url", ENDPOINTS)
def test_numbers_and_booleans_are_not_coerced(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    cases: dict[str, dict[str, Any]] = {
        "trainer.steps": job_body(trainer={"steps": "10"}),
        "trainer.batch_size": job_body(trainer=trainer(batch_size=True)),
        "trainer.learning_rate": job_body(trainer=trainer(learning_rate="0.1")),
        "trainer.grad_checkpointing": job_body(trainer=trainer(grad_checkpointing=1)),
        "trainer.dataloader.pin_memory": job_body(trainer=trainer(dataloader={"pin_memory": 0})),
        "priority": job_body(priority=5.0),
    }
    for field, body in cases.items():
        fields = refused_fields(client, url, body, auth)
        assert field in fields or any(f.startswith(field + ".") for f in fields), (field, fields)
    steps_true = job_body(trainer={"steps": True})
    assert "trainer.steps" in refused_fields(client, url, steps_true, auth)


def test_strings_still_parse_into_enums_and_datetimes(
    client: TestClient, auth: dict[str, str]
) -> None:
    deadline = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    body = job_body(
        trainer=trainer(amp="fp16", checkpoint="auto", learning_rate=1, max_grad_norm=2),
        capacity={"types": ["spot", "on_demand"], "on_budget_exceeded": "defer"},
        deadline=deadline.isoformat().replace("+00:00", "+02:00"),
        estimated_hours=1,
    )
    response = client.post("/v1/jobs", json=body, headers=auth)
    assert response.status_code == 201, response.text
    job = client.get(f"/v1/jobs/{response.json()['id']}", headers=auth).json()
    assert job["spec"]["trainer"]["amp"] == "fp16"
    assert job["spec"]["trainer"]["learning_rate"] == 1.0
    assert job["spec"]["capacity"]["types"] == ["spot", "on_demand"]
    assert datetime.fromisoformat(job["deadline_at"]) == deadline - timedelta(hours=2)
    estimate = client.post("/v1/estimate", json={**body, "name": "again"}, headers=auth)
    assert estimate.status_code == 200, estimate.text


def test_reservation_numbers_are_not_coerced(client: TestClient) -> None:
    body = {
        "cloud": "aws",
        "region": "us-east-1",
        "zone": "use1-az5",
        "instance_type": "g4dn.xlarge",
        "count": "4",
        "price_per_hour": float("inf"),
    }
    fields = refused_fields(client, "/v1/admin/reservations", body, ADMIN)
    assert {"count", "price_per_hour"} <= set(fields)


@pytest.mark.parametrize("hours", [5e-324, 1e-300, 1e-12])
@pytest.mark.parametrize("checkpoint", [{"every_steps": 1}, {"every_seconds": 5e-324}])
def test_a_vanishing_estimate_is_priced_as_a_number(
    client: TestClient, auth: dict[str, str], hours: float, checkpoint: dict[str, Any]
) -> None:
    """estimated_hours and checkpoint.every_seconds > 0 admit subnormal floats (the fuzzer's
    find): every plan's figures stay numbers (an infinity would leave the answer against its
    schema as null), the expected cost at least 0 and at most what an hour of the plan costs."""
    body = {
        "name": "tiny",
        "capacity": {"types": ["spot"]},
        "trainer": {
            "steps": 1,
            "checkpoint": {**checkpoint, "keep_last": 13, "on_preemption": False},
        },
        "estimated_hours": hours,
    }
    response = client.post("/v1/estimate", json=body, headers=auth)
    assert response.status_code == 200, response.text
    plans = response.json()["plans"]
    assert plans
    for plan in plans:
        assert isinstance(plan["expected_cost"], float | int), plan
        assert 0 <= plan["expected_cost"] <= plan["price_per_hour"], plan
        assert isinstance(plan["p_meet_deadline"], float | int), plan


@pytest.mark.parametrize("url", ENDPOINTS)
def test_a_model_no_gpu_could_train_is_refused_at_submit(
    client: TestClient, auth: dict[str, str], url: str
) -> None:
    """Issue 36, attack 4: a million-wide, thousand-layer GPT (1.3e16 parameters) was accepted
    and failed at runtime. A built-in's parameters must fit one GPU of the largest in the
    catalog (gpujobs.workloads.MAX_PARAMETERS): its every rank holds the whole model."""
    huge = {"n_embd": 1_048_576, "n_layer": 1000, "n_head": 4}
    body = job_body(trainer=trainer(workload="gpt", args=huge))
    assert refused_fields(client, url, body, auth) == ["trainer.args.n_embd"]
    wide = {"width": 4096, "stages": 16}
    body = job_body(trainer=trainer(workload="resnet", args=wide))
    assert refused_fields(client, url, body, auth) == ["trainer.args.width"]
    # Nor one whose stages GroupNorm cannot split in 8 groups (it failed as the trainer started).
    body = job_body(trainer=trainer(workload="resnet", args={"width": 12, "stages": 3}))
    assert refused_fields(client, url, body, auth) == ["trainer.args.width"]
    # GPT-2 XL's shape (1.5e9 parameters) fits.
    xl = {"n_embd": 1600, "n_layer": 48, "n_head": 25, "block_size": 1024}
    body = job_body(trainer=trainer(workload="gpt", args=xl), estimated_hours=1)
    assert client.post(url, json=body, headers=auth).status_code in (200, 201)
