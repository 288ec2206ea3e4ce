"""What a starting attempt resumes from, and whether it may: the newest checkpoint every rank can
load, a configuration that still computes the same training, and no leftover uploads."""

from __future__ import annotations

import logging
from typing import Any

from trainer.checkpoint import CheckpointState, Store, StoreUnavailable
from trainer.checkpoint.reader import load_step, manifest_steps
from trainer.config import ConfigError, config_changes
from trainer.distributed import DistContext
from trainer.progress import ProgressLog

log = logging.getLogger(__name__)


def find_checkpoint(store: Store, dist: DistContext) -> CheckpointState | None:
    """The newest checkpoint every rank can load completely (all ranks agree on it).

    A rank that cannot read the store makes every rank raise StoreUnavailable, so that none
    passes over a checkpoint it merely failed to read."""
    steps: list[int] | str = []
    if dist.is_main:
        try:
            steps = manifest_steps(store)
        except StoreUnavailable as exc:
            steps = str(exc)
    candidates = dist.broadcast(steps)
    if isinstance(candidates, str):
        raise StoreUnavailable(candidates)
    for step in candidates:
        failure: StoreUnavailable | None = None
        state: CheckpointState | None = None
        try:
            state = load_step(store, step, sorted({dist.rank, 0}))
        except StoreUnavailable as exc:
            failure = exc
        if dist.agree_any([failure is not None])[0]:
            raise failure or StoreUnavailable(f"another rank cannot read step {step}")
        if dist.all_true(state is not None):
            return state
        log.warning("checkpoint at step %d is incomplete or corrupt; trying an older one", step)
    return None


def check_config(
    state: CheckpointState,
    computing: dict[str, Any],
    *,
    allow_change: bool,
    progress: ProgressLog,
) -> None:
    """Refuse to resume a run whose configuration changes what training computes."""
    saved = state.meta.get("config")
    if saved is None:
        return  # saved by a trainer that did not record it
    changes = config_changes(saved, computing)
    if not changes:
        return
    if not allow_change:
        raise ConfigError(
            f"resuming from the checkpoint at step {state.step}: "
            + "; ".join(changes)
            + " (set trainer.checkpoint.allow_config_change to resume with the new values, "
            "or start from an empty checkpoint_uri)"
        )
    progress.event(
        "note",
        message=f"resuming the checkpoint at step {state.step} with a changed configuration "
        "(allow_config_change): " + "; ".join(changes),
    )


def check_total_steps(
    saved: int, total_steps: int, *, allow_change: bool, progress: ProgressLog
) -> None:
    """`epochs` is checked by the config; the steps it comes to also depend on the data."""
    change = f"total steps changed from {saved} to {total_steps}"
    if not allow_change:
        raise ConfigError(
            f"resuming: {change} (the dataset's size changed; set "
            "trainer.checkpoint.allow_config_change to resume anyway)"
        )
    progress.event("note", message=f"resuming with a changed configuration: {change}")


def abort_incomplete_uploads(store: Store) -> None:
    """Uploads a killed attempt left unfinished are stored (and billed) until aborted. No writer
    of this job is live yet: the previous attempt is over, this one not started."""
    try:
        aborted = store.abort_incomplete()
    except Exception as exc:  # cleanup only: the run does not depend on it
        log.warning("could not abort incomplete uploads in %r: %s", store, exc)
        return
    if aborted:
        log.info("aborted %d incomplete upload(s) left in %r", aborted, store)
