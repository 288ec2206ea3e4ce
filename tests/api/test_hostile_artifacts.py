"""Hostile trainer output through the artifacts API (issue 22, rows 1 and 4).

A trainer writes its checkpoint prefix, so everything in it is the attacker's: links out of the
prefix (to the server's secrets, its environment, another team's weights), links in a parent
component, FIFOs, devices, files larger than their manifest says, manifests that are links or
lie. Each attack is planted for real under a real API (uvicorn on a local port, SQLite), which
runs as root here as it does in production: nothing but the server's own checks stops it."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from api.settings import Settings
from devstack.s3server import S3Server
from tests.conftest import job_body, make_team
from tests.sdk.server import LiveApi, live_api

GOOD = b"good weights " * 100
OTHER_TEAMS_WEIGHTS = b"team-b's trained weights " * 100
HANG_GUARD_S = 60  # only so that a hang fails the test instead of the suite; not a timing check


@dataclass
class Team:
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Fetched:
    status: int
    body: bytes


@pytest.fixture
def api(tmp_path: Path) -> Iterator[LiveApi]:
    with live_api(tmp_path / "home") as running:
        yield running


@pytest.fixture
def team_a(api: LiveApi) -> Team:
    return Team(make_team(api.session_factory, "team-a"))


@pytest.fixture
def team_b(api: LiveApi) -> Team:
    return Team(make_team(api.session_factory, "team-b"))


def _submit(api: LiveApi, team: Team) -> str:
    response = httpx.post(f"{api.url}/v1/jobs", json=job_body(), headers=team.headers)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _home(api: LiveApi) -> Path:
    return api.attempts_root.parent


def _prefix(api: LiveApi, job_id: str) -> Path:
    """Where the API's local store looks for the job's checkpoints (the launcher's layout)."""
    return Path(Settings(home=_home(api)).checkpoint_root()) / job_id


def _manifest(directory: Path, promised: dict[str, bytes]) -> None:
    """A manifest vouching for `promised` (name: bytes), as the trainer writes it."""
    files = {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for name, data in promised.items()
    }
    (directory / "manifest.json").write_text(json.dumps({"format": 1, "files": files}))


def _checkpoint(prefix: Path, step: int, files: dict[str, bytes]) -> Path:
    directory = prefix / f"step-{step:012d}"
    directory.mkdir(parents=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    _manifest(directory, files)
    return directory


def _download(api: LiveApi, team: Team, job_id: str, path: str, *, limit: int) -> Fetched:
    """GET an artifact over real HTTP, reading at most `limit` + 1 bytes of it (a stream that
    never ends is cut there)."""
    body = b""
    url = f"{api.url}/v1/jobs/{job_id}/artifacts/{path}"
    with httpx.stream("GET", url, headers=team.headers, timeout=HANG_GUARD_S) as response:
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                break
        return Fetched(status=response.status_code, body=body)


def _steps(api: LiveApi, team: Team, job_id: str) -> list[int]:
    response = httpx.get(f"{api.url}/v1/jobs/{job_id}/artifacts", headers=team.headers)
    assert response.status_code == 200, response.text
    return [checkpoint["step"] for checkpoint in response.json()["checkpoints"]]


def _refused(fetched: Fetched, *secrets: bytes) -> None:
    assert 400 <= fetched.status < 500, (fetched.status, fetched.body[:200])
    for secret in secrets:
        assert secret not in fetched.body
    assert b"model.pt" in fetched.body or b"zero" in fetched.body  # the message names it


def _planted_target(kind: str, api: LiveApi, tmp_path: Path, team_b: Team) -> tuple[Path, bytes]:
    """A file outside team A's prefix, and the bytes of it that must never reach team A."""
    if kind == "secret-file":
        secret = tmp_path / "outside" / "secret.txt"
        secret.parent.mkdir()
        secret.write_bytes(b"operator's secret 5f1e7a\n")
        return secret, secret.read_bytes()
    if kind == "credentials-file":
        credentials = _home(api) / "credentials.json"
        credentials.write_text(json.dumps({"url": api.url, "token": "gj_secret_token_9d2c"}))
        return credentials, b"gj_secret_token_9d2c"
    if kind == "database":
        return _home(api) / "gpujobs.db", b"SQLite format 3"
    if kind == "server-environment":  # where an operator's GPUJOBS_ADMIN_TOKEN lives
        environ = Path("/proc/self/environ")
        return environ, environ.read_bytes().split(b"\0")[0]
    assert kind == "other-teams-weights"
    other = _checkpoint(_prefix(api, _submit(api, team_b)), 3, {"model.pt": OTHER_TEAMS_WEIGHTS})
    return other / "model.pt", OTHER_TEAMS_WEIGHTS


@pytest.mark.parametrize(
    "kind",
    ["secret-file", "credentials-file", "database", "server-environment", "other-teams-weights"],
)
def test_a_link_out_of_the_prefix_is_not_followed(
    kind: str, api: LiveApi, team_a: Team, team_b: Team, tmp_path: Path
) -> None:
    job = _submit(api, team_a)
    _checkpoint(_prefix(api, job), 1, {"model.pt": GOOD})
    target, secret = _planted_target(kind, api, tmp_path, team_b)
    directory = _checkpoint(_prefix(api, job), 3, {"model.pt": GOOD})
    # The manifest promises the target's exact bytes: only the link itself can give it away.
    _manifest(directory, {"model.pt": target.read_bytes()})
    (directory / "model.pt").unlink()
    (directory / "model.pt").symlink_to(target)

    fetched = _download(api, team_a, job, "3/model.pt", limit=len(target.read_bytes()))
    _refused(fetched, secret)
    assert b"symbolic link" in fetched.body
    assert _steps(api, team_a, job) == [1]  # listed only where every file is the job's own
    assert _download(api, team_a, job, "1/model.pt", limit=len(GOOD)).body == GOOD


@pytest.mark.parametrize("component", ["job-prefix", "step-directory"])
def test_a_link_in_a_parent_component_is_not_followed(
    component: str, api: LiveApi, team_a: Team, team_b: Team
) -> None:
    job = _submit(api, team_a)
    other_prefix = _prefix(api, _submit(api, team_b))
    _checkpoint(other_prefix, 3, {"model.pt": OTHER_TEAMS_WEIGHTS})
    if component == "job-prefix":
        _prefix(api, job).parent.mkdir(parents=True, exist_ok=True)
        _prefix(api, job).symlink_to(other_prefix)
    else:
        _prefix(api, job).mkdir(parents=True)
        (_prefix(api, job) / "step-000000000003").symlink_to(other_prefix / "step-000000000003")

    fetched = _download(api, team_a, job, "3/model.pt", limit=len(OTHER_TEAMS_WEIGHTS))
    assert 400 <= fetched.status < 500 and OTHER_TEAMS_WEIGHTS not in fetched.body
    listing = httpx.get(f"{api.url}/v1/jobs/{job}/artifacts", headers=team_a.headers)
    assert hashlib.sha256(OTHER_TEAMS_WEIGHTS).hexdigest() not in listing.text
    if component == "job-prefix":  # the whole prefix is not the job's: nothing can be listed
        assert listing.status_code == 409 and "symbolic link" in listing.json()["error"]["message"]
    else:
        assert listing.status_code == 200 and listing.json()["checkpoints"] == []


def test_a_fifo_is_refused_without_hanging_the_api(api: LiveApi, team_a: Team) -> None:
    job = _submit(api, team_a)
    directory = _checkpoint(_prefix(api, job), 3, {"model.pt": GOOD})
    (directory / "model.pt").unlink()
    os.mkfifo(directory / "model.pt")
    result: list[Fetched] = []
    request = threading.Thread(
        target=lambda: result.append(_download(api, team_a, job, "3/model.pt", limit=len(GOOD)))
    )
    request.start()
    request.join(timeout=HANG_GUARD_S)
    hung = request.is_alive()
    if hung:  # release the server's reader (a writer that opens and closes gives it EOF)
        os.close(os.open(directory / "model.pt", os.O_WRONLY | os.O_NONBLOCK))
        request.join(timeout=HANG_GUARD_S)
    assert not hung, "the download of a FIFO hung"
    _refused(result[0])
    assert b"FIFO" in result[0].body
    assert _steps(api, team_a, job) == []


@pytest.mark.parametrize("planted", ["link-to-dev-zero", "device-node"])
def test_a_device_is_never_opened(planted: str, api: LiveApi, team_a: Team) -> None:
    job = _submit(api, team_a)
    promised = b"\0" * 4096
    directory = _checkpoint(_prefix(api, job), 3, {"zero": promised})
    (directory / "zero").unlink()
    if planted == "link-to-dev-zero":
        (directory / "zero").symlink_to("/dev/zero")
    else:
        os.mknod(directory / "zero", 0o600 | 0o020000, os.makedev(1, 5))  # S_IFCHR: /dev/zero

    fetched = _download(api, team_a, job, "3/zero", limit=len(promised))
    assert len(fetched.body) <= len(promised)  # never more than the manifest promised
    _refused(fetched)
    assert _steps(api, team_a, job) == []


def test_a_file_larger_than_its_manifest_is_refused(api: LiveApi, team_a: Team) -> None:
    job = _submit(api, team_a)
    tail = b"bytes the manifest never vouched for"
    directory = _checkpoint(_prefix(api, job), 3, {"model.pt": GOOD})
    (directory / "model.pt").write_bytes(GOOD + tail)

    fetched = _download(api, team_a, job, "3/model.pt", limit=len(GOOD + tail))
    _refused(fetched, tail)
    assert f"{len(GOOD + tail)} bytes, its manifest says {len(GOOD)}".encode() in fetched.body
    assert _steps(api, team_a, job) == []


def test_bytes_the_manifest_does_not_vouch_for_never_arrive_whole(
    api: LiveApi, team_a: Team
) -> None:
    job = _submit(api, team_a)
    directory = _checkpoint(_prefix(api, job), 3, {"model.pt": GOOD})
    forged = b"F" * len(GOOD)  # the promised size, other bytes: found only while streaming
    (directory / "model.pt").write_bytes(forged)
    with pytest.raises(httpx.RemoteProtocolError):  # cut short of its Content-Length
        _download(api, team_a, job, "3/model.pt", limit=len(forged))


@pytest.mark.parametrize("manifest", ["link-to-another-manifest", "oversized", "lists-a-path"])
def test_a_manifest_is_read_like_any_trainer_file(
    manifest: str, api: LiveApi, team_a: Team, team_b: Team
) -> None:
    job = _submit(api, team_a)
    _checkpoint(_prefix(api, job), 1, {"model.pt": GOOD})
    directory = _checkpoint(_prefix(api, job), 3, {"model.pt": GOOD})
    if manifest == "link-to-another-manifest":
        other = _checkpoint(_prefix(api, _submit(api, team_b)), 3, {"model.pt": GOOD})
        (directory / "manifest.json").unlink()
        (directory / "manifest.json").symlink_to(other / "manifest.json")
    elif manifest == "oversized":  # valid JSON, padded past the server's bound on manifests
        text = (directory / "manifest.json").read_text()
        (directory / "manifest.json").write_text(" " * (5 * 1024 * 1024) + text)
    else:
        entry = {"size": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
        body = {"format": 1, "files": {"model.pt": entry, "../../../etc/hostname": entry}}
        (directory / "manifest.json").write_text(json.dumps(body))

    assert _steps(api, team_a, job) == [1]  # the hostile checkpoint is left out, not the rest
    fetched = _download(api, team_a, job, "3/model.pt", limit=len(GOOD))
    _refused(fetched, GOOD)
    assert b"manifest.json" in fetched.body


def test_s3_objects_are_served_only_at_their_manifest_size(
    tmp_path: Path, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3_server.create_bucket("hostile-artifacts")
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GPUJOBS_CHECKPOINT_URI", "s3://hostile-artifacts/ckpt")
    monkeypatch.setenv("GPUJOBS_S3_ENDPOINT_URL", s3_server.endpoint_url)
    tail = b"bytes the manifest never vouched for"
    with live_api(tmp_path / "home") as api:
        team = Team(make_team(api.session_factory, "team-a"))
        job = _submit(api, team)
        client = s3_server.client()
        for step, model in ((1, GOOD), (3, GOOD + tail)):
            key = f"ckpt/{job}/step-{step:012d}"
            entry = {"size": len(GOOD), "sha256": hashlib.sha256(GOOD).hexdigest()}
            client.put_object(Bucket="hostile-artifacts", Key=f"{key}/model.pt", Body=model)
            manifest = json.dumps({"format": 1, "files": {"model.pt": entry}}).encode()
            client.put_object(Bucket="hostile-artifacts", Key=f"{key}/manifest.json", Body=manifest)

        assert _steps(api, team, job) == [1]
        assert _download(api, team, job, "1/model.pt", limit=len(GOOD)).body == GOOD
        _refused(_download(api, team, job, "3/model.pt", limit=len(GOOD + tail)), tail)


def test_a_hard_link_to_a_servers_file_is_not_served(
    api: LiveApi, team_a: Team, tmp_path: Path
) -> None:
    """Where the kernel lets a trainer hard-link a file it cannot read (fs.protected_hardlinks
    off), the link is a regular file in its prefix: planted here as root, as such a kernel
    allows."""
    secret = tmp_path / "server-secret.txt"
    secret.write_bytes(b"operator's secret 71c0de\n")
    job_id = _submit(api, team_a)
    directory = _checkpoint(_prefix(api, job_id), 4, {"model.pt": b"x"})
    (directory / "model.pt").unlink()
    os.link(secret, directory / "model.pt")
    _manifest(directory, {"model.pt": secret.read_bytes()})

    fetched = _download(api, team_a, job_id, "4/model.pt", limit=4096)

    _refused(fetched, b"operator's secret")


def test_a_manifest_nested_to_exhaust_the_parser_is_refused_not_a_500(
    api: LiveApi, team_a: Team
) -> None:
    job_id = _submit(api, team_a)
    good = _checkpoint(_prefix(api, job_id), 2, {"model.pt": b"weights"})
    deep = _checkpoint(_prefix(api, job_id), 5, {"model.pt": b"weights"})
    (deep / "manifest.json").write_text("[" * 100_000)

    assert _steps(api, team_a, job_id) == [2]
    assert good.exists()
    fetched = _download(api, team_a, job_id, "5/model.pt", limit=4096)
    assert 400 <= fetched.status < 500, fetched.status
