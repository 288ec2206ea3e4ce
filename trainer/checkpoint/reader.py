"""Finding and loading the newest complete checkpoint.

A checkpoint is complete when its manifest exists and every file it lists has the recorded size
and sha256. Anything else (a run killed mid-upload, a truncated shard) is skipped in favour of
the next older complete one.

Only what the store says is there decides that: a missing file, a garbled manifest or a checksum
mismatch. A failure to read (a disk error, an S3 5xx, a timeout, a dropped connection) is
retried with backoff and then raised as StoreUnavailable: a checkpoint that could not be read
is not a corrupt one, and must not be passed over or deleted for it.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from gpujobs.checkpoints import (
    MANIFEST_FILE,
    SHARED_FILE,
    Manifest,
    manifest_key,
    rank_file,
    step_dir,
    steps_in,
)
from trainer.checkpoint.store import Store, open_store

log = logging.getLogger(__name__)

T = TypeVar("T")

# Backoff between tries of a failed read: 0.5 + 1 + 2 + 4 s, on top of botocore's own retries.
READ_ATTEMPTS = 5
READ_BACKOFF_S = 0.5


class StoreUnavailable(Exception):
    """The checkpoint store could not be read, even after retries. Nothing is known to be
    wrong with the checkpoints: the attempt stops without touching them."""


def with_retries(what: str, read: Callable[[], T]) -> T:
    """`read()`, tried again with backoff when it fails other than by a missing file."""
    delay = READ_BACKOFF_S
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            return read()
        except FileNotFoundError:
            raise
        except Exception as exc:
            if attempt == READ_ATTEMPTS:
                raise StoreUnavailable(f"cannot read {what}: {exc!r}") from exc
            log.warning("reading %s failed (%r); trying again in %.1f s", what, exc, delay)
            time.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


@dataclass
class CheckpointState:
    step: int
    world_size: int
    shared: dict[str, Any]
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def manifest_steps(store: Store) -> list[int]:
    """Steps that have a manifest, newest first (their files are not checked yet)."""
    steps = steps_in(with_retries(f"the list of {store!r}", store.list))
    return sorted((s for s, names in steps.items() if MANIFEST_FILE in names), reverse=True)


def read_manifest(store: Store, step: int) -> Manifest | None:
    key = manifest_key(step)
    try:
        data = with_retries(key, lambda: store.get(key))
    except FileNotFoundError:
        log.warning("checkpoint step %d: no manifest", step)
        return None
    try:
        return Manifest.loads(data)
    except Exception as exc:  # a garbled manifest means: not complete
        log.warning("checkpoint step %d: garbled manifest (%s)", step, exc)
        return None


def read_verified(store: Store, manifest: Manifest, name: str) -> bytes | None:
    entry = manifest.files.get(name)
    if entry is None:
        log.warning("checkpoint step %d: %s is not in its manifest", manifest.step, name)
        return None
    key = f"{step_dir(manifest.step)}/{name}"
    try:
        data = with_retries(key, lambda: store.get(key))
    except FileNotFoundError:
        log.warning("checkpoint step %d: %s is missing", manifest.step, name)
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
    None). Returns None when anything is missing or does not match the manifest; raises
    StoreUnavailable when the store cannot be read."""
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
