"""Shared bits for the deployment tests: the repo root and the env names Settings reads."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from api.settings import Settings, setting_names

REPO = Path(__file__).resolve().parents[2]
ENV_PREFIX = "GPUJOBS_"
# Read by boto3 for the checkpoint store, not by Settings.
AWS_KEYS = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"})
# What a production control plane must be told (the rest have usable defaults).
PROD_SETTINGS = frozenset(
    {
        "GPUJOBS_DATABASE_URL",
        "GPUJOBS_BROKER_URL",
        "GPUJOBS_LAUNCHER",
        "GPUJOBS_CHECKPOINT_URI",
        "GPUJOBS_S3_ENDPOINT_URL",
        "GPUJOBS_PUBLIC_URL",
        "GPUJOBS_ADMIN_TOKEN",
    }
)


def settings_env_names() -> set[str]:
    """Every env var Settings reads: GPUJOBS_<NAME>, the launchers' groups' included."""
    return {ENV_PREFIX + name.upper() for name in setting_names()}


def unknown_settings_keys(keys: Iterable[str]) -> set[str]:
    """The GPUJOBS_* keys among `keys` that no Settings field reads (typos, stale names)."""
    return {key for key in keys if key.startswith(ENV_PREFIX)} - settings_env_names()


def settings_from_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> Settings:
    """Settings built from exactly the GPUJOBS_* keys of `env`: proves the values parse."""
    for key in list(os.environ):
        if key.startswith(ENV_PREFIX):
            monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith(ENV_PREFIX):
            monkeypatch.setenv(key, value)
    return Settings()
