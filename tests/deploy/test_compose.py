"""docker-compose.yml: valid for docker-compose, wired in the right order, on real Settings keys."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
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
        "python",
        "-m",
        "worker.api_app",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    # The admin CLI migrates from the installed package: no alembic.ini needed in the image.
    assert services["migrate"]["command"] == ["python", "-m", "api.admin", "migrate"]
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
    # Only the api serves the admin API; its token comes from the api's entrypoint (below).
    required = PROD_SETTINGS - {"GPUJOBS_ADMIN_TOKEN"}
    for name in (*APP_SERVICES, *ONE_SHOTS):
        env = _env(compose["services"][name])
        missing = (required | {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}) - env.keys()
        assert not missing, f"{name} lacks {sorted(missing)}"
        assert {key for key in env if key.startswith("AWS_")} <= AWS_KEYS
    api = _env(compose["services"]["api"])
    assert "GPUJOBS_ADMIN_TOKEN" in api and api.get("ADMIN_TOKEN_FILE")


def test_no_fixed_admin_token_and_the_api_on_loopback(resolved: dict[str, Any]) -> None:
    """Resolved without an .env: nothing carries a token, and the API is published on 127.0.0.1
    only; the other services publish nothing."""
    services = resolved["services"]
    for name, service in services.items():
        assert not _env(service).get("GPUJOBS_ADMIN_TOKEN"), f"{name} has a fixed admin token"
    (port,) = services["api"]["ports"]
    published = port if isinstance(port, dict) else {"host_ip": str(port).split(":")[0]}
    assert published["host_ip"] == "127.0.0.1", port
    for name, service in services.items():
        assert name == "api" or not service.get("ports"), f"{name} publishes a port"
    volumes = {
        (v["target"] if isinstance(v, dict) else v.split(":")[1])
        for v in services["api"]["volumes"]
    }
    token_file = _env(services["api"])["ADMIN_TOKEN_FILE"]
    assert str(Path(token_file).parent) in volumes, "the generated token must outlive the container"


def test_the_s3_server_uses_small_volumes(resolved: dict[str, Any]) -> None:
    command = " ".join(resolved["services"]["s3"]["command"])
    assert "-master.volumeSizeLimitMB=" in command and "weed server" in command
    limit = int(_env(resolved["services"]["s3"])["S3_VOLUME_SIZE_LIMIT_MB"])
    assert 0 < limit <= 1024, "30 GB volumes leave no writable volume on an ordinary disk"


def test_stopping_the_worker_drains_its_trainers(
    resolved: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = resolved["services"]["worker"]
    settings = settings_from_env(monkeypatch, _env(worker))
    assert settings.local.drain_on_shutdown
    assert worker.get("init") is True, "an init reaps trainers orphaned by a pool restart"
    grace = worker["stop_grace_period"]
    seconds = int(grace[:-1]) * {"s": 1, "m": 60}[grace[-1]]
    assert seconds > settings.local.spot_notice_s + 15, "the drain must finish before SIGKILL"


def test_env_example_is_a_valid_env_file() -> None:
    example = REPO / ".env.example"
    result = _run_compose("--env-file", str(example), "config", "-q")
    assert result.returncode == 0, result.stderr
    keys = set(re.findall(r"^(?:#\s*)?([A-Z][A-Z0-9_]+)=", example.read_text(), re.MULTILINE))
    assert {"API_BIND_ADDRESS", "GPUJOBS_ADMIN_TOKEN", "POSTGRES_IMAGE"} <= keys
    assert not unknown_settings_keys(keys), unknown_settings_keys(keys)
    text = COMPOSE_FILE.read_text()
    for key in keys:  # every variable it documents is one the compose file reads
        assert "${" + key in text, f".env.example sets {key}, which docker-compose.yml never reads"


def test_the_api_starts_with_the_kubernetes_launcher_and_no_cluster_config(
    tmp_path: Path,
) -> None:
    """GPUJOBS_LAUNCHER=kubernetes without a kubeconfig: the app imports and serves /healthz."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUJOBS_", "KUBE"))}
    env.update(
        GPUJOBS_LAUNCHER="kubernetes",
        GPUJOBS_HOME=str(tmp_path / "home"),
        HOME=str(tmp_path),
        KUBECONFIG=str(tmp_path / "missing-kubeconfig"),
    )
    probe = (
        "from fastapi.testclient import TestClient\n"
        "import worker.api_app as m\n"
        "with TestClient(m.app) as client:\n"
        "    print(client.get('/healthz').status_code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "200"


def test_entrypoint_generates_the_admin_token_once(tmp_path: Path) -> None:
    token_file = tmp_path / "secrets" / "admin-token"
    token_file.parent.mkdir()

    def run(extra: dict[str, str]) -> str:
        env = {"PATH": os.environ["PATH"], "ADMIN_TOKEN_FILE": str(token_file), **extra}
        result = subprocess.run(
            ["sh", str(REPO / "docker/entrypoint.sh"), "sh", "-c", 'echo "$GPUJOBS_ADMIN_TOKEN"'],
            env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    first = run({})
    assert len(first) >= 32
    assert token_file.read_text().strip() == first
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert run({}) == first, "a restart keeps the token"
    assert run({"GPUJOBS_ADMIN_TOKEN": "operator-set"}) == "operator-set"
    assert token_file.read_text().strip() == first


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
    # The S3 server accepts the same static credentials the control plane uses.
    s3_env = _env(resolved["services"]["s3"])
    assert s3_env["S3_ACCESS_KEY"] == env["AWS_ACCESS_KEY_ID"]
    assert s3_env["S3_SECRET_KEY"] == env["AWS_SECRET_ACCESS_KEY"]
