"""Fixtures for the trainer's tests; the S3 server is a session fixture in tests/conftest.py."""

from __future__ import annotations

import pytest

from devstack.s3server import S3Server


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The S3 server's credentials in this process's environment (for in-process trainers)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server
