"""Two embedded instances on one machine (two checkouts, `GPUJOBS_PORT=8001` for the second):
neither takes the other's place in the credentials, and each checkout's CLI talks to its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gpujobs.config import resolve, save_credentials
from tests.sdk.server import free_port

A, B = "http://127.0.0.1:8000", "http://127.0.0.1:8001"


def _two_checkouts(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """What `make run` leaves in two checkouts, A started first: each instance's own file in
    its home, and the user's file, written by both. Returns the checkouts and the environment."""
    env = {"HOME": str(tmp_path / "user")}
    user_file = tmp_path / "user" / ".config" / "gpujobs" / "credentials.json"
    a, b = tmp_path / "a", tmp_path / "b"
    for checkout, url, token in ((a, A, "gpj_a"), (b, B, "gpj_b")):
        (checkout / ".gpujobs").mkdir(parents=True)
        save_credentials(checkout / ".gpujobs" / "credentials.json", url=url, token=token)
        save_credentials(user_file, url=url, token=token)
    return a, b, env


def test_each_checkout_finds_its_own_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, env = _two_checkouts(tmp_path)
    monkeypatch.setenv("HOME", env["HOME"])  # Path.home(): the user's file
    for where, url, token in ((a, A, "gpj_a"), (a / "examples", A, "gpj_a"), (b, B, "gpj_b")):
        where.mkdir(exist_ok=True)
        found = resolve(environ=env, cwd=where)
        assert (found.url, found.token) == (url, token), where
    # Outside any checkout: the instance started last; another by its URL, with its own token.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert (resolve(environ=env, cwd=outside).url, resolve(environ=env, cwd=outside).token) == (
        B,
        "gpj_b",
    )
    by_url = resolve(environ={**env, "GPUJOBS_URL": A}, cwd=outside)
    assert (by_url.url, by_url.token) == (A, "gpj_a")
    # In checkout B, A by its URL still gets A's token (from the user's file), never B's.
    assert resolve(environ={**env, "GPUJOBS_URL": f"{A}/"}, cwd=b).token == "gpj_a"
    # GPUJOBS_HOME names the instance wherever one stands, as it does for `make run`.
    home_a = resolve(environ={**env, "GPUJOBS_HOME": str(a / ".gpujobs")}, cwd=b)
    assert (home_a.url, home_a.token) == (A, "gpj_a")


def test_a_folder_that_others_may_write_does_not_pick_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _, env = _two_checkouts(tmp_path)
    monkeypatch.setenv("HOME", env["HOME"])
    planted = a / ".gpujobs" / "credentials.json"
    planted.write_text(json.dumps({"url": "http://attacker.example", "token": "gpj_x"}))
    planted.chmod(0o666)
    found = resolve(environ=env, cwd=a)
    assert (found.url, found.token) == (B, "gpj_b")  # the user's file, not the planted one


def test_an_older_single_server_file_keeps_its_token(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps({"url": A, "token": "gpj_old"}))
    save_credentials(path, url=B, token="gpj_b")
    env = {"GPUJOBS_CREDENTIALS_FILE": str(path)}
    assert resolve(environ=env).token == "gpj_b"
    assert resolve(environ={**env, "GPUJOBS_URL": A}).token == "gpj_old"
    assert path.stat().st_mode & 0o777 == 0o600


@contextmanager
def _instance(checkout: Path, user_home: Path) -> Iterator[str]:
    """`make run` in `checkout`: `python -m worker.standalone` with its home in the checkout."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    # No job runs here: the trainers' directories stay in the test's folder, not /var/lib.
    env.update(HOME=str(user_home), GPUJOBS_PORT=str(port), GPUJOBS_TRAINER_HOME=str(checkout))
    process = subprocess.Popen(
        [sys.executable, "-m", "worker.standalone"],
        cwd=checkout,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, "standalone failed"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _cli(cwd: Path, user_home: Path, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUJOBS_")}
    env.update(HOME=str(user_home), **extra)
    return subprocess.run(
        [sys.executable, "-m", "gpujobs.cli", *argv],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_second_instance_leaves_the_first_checkouts_cli_alone(tmp_path: Path) -> None:
    user_home = tmp_path / "user"
    a, b = tmp_path / "clone-a", tmp_path / "clone-b"
    for checkout in (a, b):
        checkout.mkdir()
    with _instance(a, user_home) as url_a, _instance(b, user_home) as url_b:
        # Tell the two apart: only A's team has a budget (set with A's admin token).
        admin = (a / ".gpujobs" / "admin_token").read_text().strip()
        set_budget = httpx.put(
            f"{url_a}/v1/admin/teams/default/budget",
            json={"monthly_usd": 40},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert set_budget.status_code == 200, set_budget.text

        def budget(where: Path, **extra: str) -> float | None:
            run = _cli(where, user_home, "budget", "--json", **extra)
            assert run.returncode == 0, run.stderr
            monthly: float | None = json.loads(run.stdout)["monthly_usd"]
            return monthly

        assert budget(a) == 40  # A's checkout: A, though B started last
        assert budget(a / ".gpujobs") == 40  # anywhere below it too
        assert budget(b) is None
        assert budget(tmp_path) is None  # outside: the instance started last
        assert budget(tmp_path, GPUJOBS_URL=url_a) == 40  # or any, by its URL
        user_file = json.loads((user_home / ".config/gpujobs/credentials.json").read_text())
        assert set(user_file["servers"]) == {url_a, url_b}
