"""Finding and loading the newest complete checkpoint.

A checkpoint is complete when its manifest exists and every file it lists has the recorded size
and sha256. Anything else (a run killed mid-upload, a truncated shard) is skipped in favour of
the next older complete one.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.checkpoint.layout import (
    MANIFEST_FILE,
    SHARED_FILE,
    Manifest,
    rank_file,
    step_dir,
    steps_in,
)
from trainer.checkpoint.store import Store, open_store

log = logging.getLogger(__name__)


@dataclass
class CheckpointState:
    step: int
    world_size: int
    shared: dict[str, Any]
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def manifest_steps(store: Store) -> list[int]:
    """Steps that have a manifest, newest first (their files are not checked yet)."""
    steps = steps_in(store.list())
    return sorted((s for s, names in steps.items() if MANIFEST_FILE in names), reverse=True)


def read_manifest(store: Store, step: int) -> Manifest | None:
    try:
        return Manifest.loads(store.get(f"{step_dir(step)}/{MANIFEST_FILE}"))
    except Exception as exc:  # a missing or garbled manifest means: not complete
        log.warning("checkpoint step %d: unreadable manifest (%s)", step, exc)
        return None


def read_verified(store: Store, manifest: Manifest, name: str) -> bytes | None:
    entry = manifest.files.get(name)
    if entry is None:
        log.warning("checkpoint step %d: %s is not in its manifest", manifest.step, name)
        return None
    try:
        data = store.get(f"{step_dir(manifest.step)}/{name}")
    except Exception as exc:
        log.warning("checkpoint step %d: cannot read %s (%s)", manifest.step, name, exc)
        return None
    if not entry.matches(data):
        log.warning("checkpoint step %d: %s does not match its checksum", manifest.step, name)
        return None
    return data


def deserialize(data: bytes) -> Any:
    # weights_only: loading a checkpoint never runs code from it.
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def load_step(store: Store, step: int, ranks: list[int] | None) -> CheckpointState | None:
    """Load one checkpoint if complete: the shared state and the given ranks' parts (all if
    None). Returns None when anything is missing or does not match the manifest."""
    manifest = read_manifest(store, step)
    if manifest is None or manifest.step != step:
        return None
    wanted = range(manifest.world_size) if ranks is None else ranks
    shared = read_verified(store, manifest, SHARED_FILE)
    if shared is None:
        return None
    parts: dict[int, dict[str, Any]] = {}
    for rank in wanted:
        if rank >= manifest.world_size:
            continue  # a bigger world than the one that saved: the caller adapts
        data = read_verified(store, manifest, rank_file(rank))
        if data is None:
            return None
        parts[rank] = deserialize(data)
    return CheckpointState(
        step=step,
        world_size=manifest.world_size,
        shared=deserialize(shared),
        ranks=parts,
        meta=manifest.meta,
    )


def complete_checkpoints(store: Store, ranks: list[int] | None = None) -> Iterator[CheckpointState]:
    """Complete checkpoints, newest first, loaded lazily."""
    for step in manifest_steps(store):
        state = load_step(store, step, ranks)
        if state is not None:
            yield state


def load_latest(uri: str, *, endpoint_url: str | None = None) -> CheckpointState | None:
    """The newest complete checkpoint at `uri` with every rank's part, or None."""
    store = open_store(uri, endpoint_url=endpoint_url, create=False)
    return next(complete_checkpoints(store), None)


def latest_complete_step(uri: str, *, endpoint_url: str | None = None) -> int | None:
    state = load_latest(uri, endpoint_url=endpoint_url)
    return None if state is None else state.step
