"""docker-compose.yml: valid for docker-compose, wired in the right order, on real Settings keys."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.deploy.support import (
    AWS_KEYS,
    PROD_SETTINGS,
    REPO,
    settings_from_env,
    unknown_settings_keys,
)

COMPOSE_FILE = REPO / "docker-compose.yml"
APP_SERVICES = ("api", "worker", "beat")
ONE_SHOTS = ("migrate", "create-bucket")


def _docker_compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail(
            "docker-compose is not installed; the Makefile installs it with "
            "`apt-get install -y --no-install-recommends docker-compose` (1.29.2 validates "
            "compose files offline with `docker-compose -f FILE config -q`)"
        )
    return binary


def _run_compose(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_docker_compose(), "-f", str(COMPOSE_FILE), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The file as written (PyYAML resolves the anchors and `<<` merges)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    """The file as docker-compose resolves it: defaults interpolated, merges applied."""
    result = _run_compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def _env(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: str(value) for key, value in environment.items()}


def _depends(service: dict[str, Any]) -> dict[str, str]:
    depends = service.get("depends_on") or {}
    if isinstance(depends, list):
        return dict.fromkeys(depends, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in depends.items()}


def test_docker_compose_validates_the_file() -> None:
    result = _run_compose("config", "-q")
    assert result.returncode == 0, f"docker-compose config -q failed:\n{result.stderr}"


def test_services_and_startup_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in (*APP_SERVICES, *ONE_SHOTS, "postgres", "redis", "s3"):
        assert name in services, f"service {name!r} missing"
    for name in ("postgres", "redis", "s3"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} needs a healthcheck"

    for name in APP_SERVICES:
        depends = _depends(services[name])
        assert depends.get("migrate") == "service_completed_successfully", name
        assert depends.get("create-bucket") == "service_completed_successfully", name
        assert depends.get("redis") == "service_healthy", name
    assert _depends(services["migrate"]).get("postgres") == "service_healthy"
    assert _depends(services["create-bucket"]).get("s3") == "service_healthy"
    for name in ONE_SHOTS:
        assert services[name].get("restart") == "no", f"{name} is a one-shot"


def test_entry_points(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["api"]["command"] == [
        "uvicorn",
        "worker.api_app:app",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    assert services["migrate"]["command"] == ["alembic", "upgrade", "head"]
    assert services["worker"]["command"][:4] == ["celery", "-A", "worker.celery_app", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "worker.celery_app", "beat"]
    # The image runs as a non-root user whose WORKDIR is read-only: beat's schedule file must
    # live somewhere writable.
    assert any(
        arg.startswith("--schedule=/var/lib/gpujobs/") for arg in services["beat"]["command"]
    )


def test_images_build_from_the_repo_dockerfiles(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("api", "migrate", "create-bucket"):
        assert services[name]["build"]["dockerfile"] == "docker/api.Dockerfile", name
    for name in ("worker", "beat"):
        build = services[name]["build"]
        assert build["dockerfile"] == "docker/worker.Dockerfile", name
        # The local launcher runs trainers inside the worker: it needs torch.
        assert "INSTALL_TRAINER" in build["args"], name
    for service in services.values():
        if "build" in service:
            assert (REPO / service["build"]["dockerfile"]).is_file()
    worker_dockerfile = (REPO / "docker/worker.Dockerfile").read_text()
    assert "ARG INSTALL_TRAINER" in worker_dockerfile


def test_every_gpujobs_key_is_a_settings_field(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        unknown = unknown_settings_keys(_env(service))
        assert not unknown, f"{name}: {sorted(unknown)} are not fields of api.settings.Settings"


def test_app_services_get_the_production_settings(compose: dict[str, Any]) -> None:
    for name in (*APP_SERVICES, *ONE_SHOTS):
        env = _env(compose["services"][name])
        missing = (PROD_SETTINGS | {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) - env.keys()
        assert not missing, f"{name} lacks {sorted(missing)}"
        assert {key for key in env if key.startswith("AWS_")} <= AWS_KEYS


def test_resolved_env_parses_as_settings(
    resolved: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(resolved["services"]["worker"])
    settings = settings_from_env(monkeypatch, env)
    assert settings.launcher == "local"
    assert settings.database_url.startswith("postgresql+psycopg://")
    assert settings.broker_url.startswith("redis://redis:")
    assert settings.checkpoint_uri.startswith("s3://")
    assert settings.s3_endpoint_url == "http://s3:8333"
    assert settings.public_url == "http://api:8000"
    assert settings.admin_token
    # The S3 server accepts the same static credentials the control plane uses.
    s3_env = _env(resolved["services"]["s3"])
    assert s3_env["S3_ACCESS_KEY"] == env["AWS_ACCESS_KEY_ID"]
    assert s3_env["S3_SECRET_KEY"] == env["AWS_SECRET_ACCESS_KEY"]
